"""The environment step TD3 and SAC share: act, step the env, store the transition in the replay
buffer, learn. Native envs fuse all of it into one compiled step; Python-stepped envs run ``act``,
then the env from Python, then :func:`store`."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import checkpoint
from ..arrays import Array, asarray, zeros
from ..data import ReplayRing, memmap_replay_buffer, replay_buffer, transitions
from ..devices import Device
from ..envs import env_critic_observation, env_reset_done, env_step
from ..errors import CheckpointError, ConfigError
from ..kernels.core.api import copy, increment
from ..kernels.offpolicy.api import concat_columns, replay_add, replay_sample, slice_columns, track_episodes
from ..kernels.random.api import rng
from ..kernels.replay.api import (
    EMPTY,
    bootstrap_target,
    linear_anneal,
    n_step_gather,
    priority_mark_new,
    priority_sample,
    priority_update,
    replay_gather,
    scale_rows,
    td_priority,
    tree_leaves,
    uniform_index,
)
from ..nn import adam_update, decay_weights
from ..staging import Below, Every, fork, when

__all__ = [
    "CriticObservation",
    "NStepBatch",
    "Priorities",
    "actor_rows",
    "after_warmup",
    "bootstrap",
    "check_iteration",
    "critic_observation",
    "critic_rows",
    "delayed",
    "each_critic",
    "n_step_batch",
    "native_step",
    "prepare_resume",
    "priorities",
    "replay_fields",
    "replay_ring",
    "replay_row",
    "sample_batch",
    "store",
    "target_reward_and_gamma",
    "update_priorities",
    "validate_checkpoint",
    "weight_gradient",
]

Collect = Callable[[Device, Any, Any, Any], None]  # (device, config, state, obs)
Update = Callable[[Device, Any, Any], None]  # (device, config, state)


# ---------------------------------------------------------------- asymmetric critic (config.asymmetric_critic)


@dataclass
class CriticObservation:
    """Asymmetric actor-critic (Pinto et al. 2018; "Learning to Fly in Seconds"): the critics see
    the env's privileged observation (:func:`~dispatchrl.envs.env_critic_observation`), the
    actor its own. Replay rows hold [actor observation | critic observation]; each network reads
    its columns through these scratch arrays. The deployed policy is the actor alone."""

    now: Array  # (N, C) the env's critic observation, written before it is stored
    actor: Array  # (B, O) a batch's actor columns
    critic: Array  # (B, C) a batch's critic columns


def critic_observation(
    device: Device, config: Any, obs_dim: int, critic_obs_dim: int | None
) -> CriticObservation | None:
    """The asymmetric critic's scratch arrays, or None when the critics see the actor's
    observation (the default)."""
    if not config.asymmetric_critic:
        return None
    if critic_obs_dim is None:
        raise ConfigError("asymmetric_critic: the env has no critic observation (NativeEnv.critic_observation_dim)")
    rows = config.batch_size
    return CriticObservation(
        zeros(device, (config.num_envs, critic_obs_dim)),
        zeros(device, (rows, obs_dim)),
        zeros(device, (rows, critic_obs_dim)),
    )


def actor_rows(device: Device, state: Any, rows: Array) -> Array:
    """The actor's columns of replay rows (the rows themselves without an asymmetric critic)."""
    c = getattr(state, "critic_observation", None)
    if c is None:
        return rows
    slice_columns(device, rows, 0, c.actor)
    return c.actor


def critic_rows(device: Device, state: Any, rows: Array) -> Array:
    """The critics' columns of replay rows (the rows themselves without an asymmetric critic)."""
    c = getattr(state, "critic_observation", None)
    if c is None:
        return rows
    slice_columns(device, rows, rows.shape[1] - c.critic.shape[1], c.critic)
    return c.critic


def replay_row(device: Device, env: Any, state: Any, out: Array) -> Array:
    """``out`` = the native env's current observation as the replay stores it: the observation,
    or [observation | critic observation]."""
    env_now, c = state.env_state, getattr(state, "critic_observation", None)
    if c is None:
        copy(device, env_now.obs, out)
    else:
        env_critic_observation(device, env, env_now, c.now)
        concat_columns(device, env_now.obs, c.now, out)
    return out


# ---------------------------------------------------------------- prioritized replay (config.prioritized)


@dataclass
class Priorities:
    """Prioritized replay over the ring (Schaul et al. 2016), kept next to it in the state."""

    sum_tree: Array  # float64 (2L,): stored values (priority + eps) ** alpha, summed
    min_tree: Array  # float64 (2L,): their minima (EMPTY for empty rows)
    max_priority: Array  # float64 (1,): largest priority seen, new rows get it
    beta: Array  # float64 (1,): annealed from config.priority_beta to 1 over the run
    index: Array  # int64 (B,): the sampled rows
    weight: Array  # (B,): importance weights of the sampled rows
    priority: Array  # (B,): the twin critics' mean |TD error| on them


def priorities(device: Device, config: Any, batch_size: int) -> Priorities | None:
    """The prioritized-replay state, or None for uniform replay (the default)."""
    if not config.prioritized:
        return None
    leaves = tree_leaves(config.capacity)
    return Priorities(
        zeros(device, 2 * leaves, np.float64),
        asarray(device, np.full(2 * leaves, EMPTY)),
        asarray(device, np.ones(1)),
        asarray(device, np.array([config.priority_beta])),
        zeros(device, batch_size, np.int64),
        zeros(device, batch_size),
        zeros(device, batch_size),
    )


def _mark_new(device: Device, config: Any, state: Any, rows: int) -> None:
    p = getattr(state, "priorities", None)
    if p is not None:  # before replay_add: the rows it is about to write get the max priority
        priority_mark_new(
            device,
            p.sum_tree,
            p.min_tree,
            p.max_priority,
            state.replay.position,
            rows,
            state.replay.capacity,
            config.priority_alpha,
            config.priority_eps,
        )


# ---------------------------------------------------------------- n-step returns (config.n_step)


@dataclass
class NStepBatch:
    """n-step replay: the ring keeps 1-step transitions; a sampled row's window of up to n of its
    env's transitions is read at sample time (cut at episode ends and at the env's newest one)."""

    index: Array  # int64 (B,): the sampled rows (uniform replay; prioritized uses priorities.index)
    discount: Array  # float64 (B,): gamma ** (transitions in the row's window)
    zero_reward: Array  # (B,) zeros: td_target's reward, the window's return is added after


def n_step_batch(device: Device, config: Any, batch_size: int) -> NStepBatch | None:
    """The n-step state, or None for 1-step targets (the default)."""
    if config.n_step == 1:
        return None
    return NStepBatch(
        zeros(device, batch_size, np.int64), zeros(device, batch_size, np.float64), zeros(device, batch_size)
    )


def replay_ring(device: Device, config: Any, obs_dim: int, action_dim: int) -> ReplayRing:
    """The ring of ``config.capacity`` rows: in memory, or in memmaps under ``config.memmap_path``."""
    if config.memmap_path is None:
        return replay_buffer(device, config.capacity, obs_dim, action_dim)
    return memmap_replay_buffer(device, config.capacity, obs_dim, action_dim, config.memmap_path)


def replay_fields(device: Device, config: Any, obs_dim: int, action_dim: int, seed: int) -> dict[str, Any]:
    """The State fields TD3, SAC and DQN build alike, for rows of ``obs_dim`` observation and
    ``action_dim`` action columns: the replay ring, its sampled batch and the current transition,
    the actions, the random stream and step counter, the critic statistics, and the prioritized
    and n-step parts (None unless configured); ``episodes`` is attached by the driver."""
    envs, rows = config.num_envs, config.batch_size
    return dict(
        replay=replay_ring(device, config, obs_dim, action_dim),
        batch=transitions(device, rows, obs_dim, action_dim),
        transition=transitions(device, envs, obs_dim, action_dim),
        action=zeros(device, (envs, action_dim)),
        episodes=None,
        rng=rng(device, seed),
        step=zeros(device, 1, np.int64),
        critic_stats=zeros(device, 3, np.float64),
        priorities=priorities(device, config, rows),
        n_step=n_step_batch(device, config, rows),
    )


def target_reward_and_gamma(config: Any, state: Any) -> tuple[Array, float]:
    """td_target's reward and γ: the batch's and config.gamma, or (n-step) zeros and 1, so the
    target holds (1 − terminated) Q' until :func:`bootstrap` adds the window's return."""
    n = getattr(state, "n_step", None)
    return (state.batch.reward, config.gamma) if n is None else (n.zero_reward, 1.0)


def bootstrap(device: Device, state: Any, target: Array) -> None:
    """n-step only: ``target = R + γ^k target`` with the window's return R and length k."""
    n = getattr(state, "n_step", None)
    if n is not None:
        bootstrap_target(device, state.batch.reward, n.discount, target)


def _gather(device: Device, config: Any, state: Any, index: Array) -> None:
    n = getattr(state, "n_step", None)
    if n is None:
        replay_gather(device, state.replay, index, state.batch)
    else:
        n_step_gather(
            device, state.replay, index, config.num_envs, config.n_step, config.gamma, state.batch, n.discount
        )


def sample_batch(device: Device, config: Any, state: Any) -> None:
    """``state.batch`` from the replay ring: uniform, or prioritized (β annealed to 1); 1-step
    transitions, or n-step windows."""
    p = state.priorities
    if p is None:
        n = getattr(state, "n_step", None)
        if n is None:
            replay_sample(device, state.rng, state.replay, state.batch)
        else:  # the same rows replay_sample would draw
            uniform_index(device, state.rng, state.replay.size, n.index)
            _gather(device, config, state, n.index)
        return
    horizon = config.priority_beta_steps or max(config.total_steps // config.num_envs, 1)
    linear_anneal(device, state.step, config.priority_beta, 1.0, horizon, p.beta)
    priority_sample(device, state.rng, p.sum_tree, p.min_tree, state.replay.size, p.beta, p.index, p.weight)
    _gather(device, config, state, p.index)


def each_critic(device: Device, pairs: tuple, work: Callable[[Device, Any, Any], None]) -> None:
    """``work(device, critic, buffers)`` for each twin critic's (network, buffers) in ``pairs``:
    the twins write no array the other uses, so two learner threads may run them at once
    (:func:`dispatchrl.staging.fork`; the same results)."""
    fork(device, tuple((lambda device, c=c, b=b: work(device, c, b)) for c, b in pairs))


def weight_gradient(device: Device, state: Any, d_output: Any) -> None:
    """Importance weights on a critic's per-row loss gradient (prioritized replay only)."""
    if state.priorities is not None:
        scale_rows(device, state.priorities.weight, d_output)


def optimize(device: Device, config: Any, net: Any, lr: float) -> None:
    """One Adam step of ``net``, after RLtools' weight decay where ``config.weight_decay`` > 0
    (decided here, at trace time, so without it a step holds exactly the Adam kernels)."""
    if config.weight_decay > 0:
        decay_weights(device, net, config.weight_decay / 2)
    adam_update(device, net, lr)


def update_priorities(device: Device, config: Any, state: Any, q1: Array, q2: Array, target: Array) -> None:
    """The sampled rows' priorities become the twin critics' mean |TD error| (prioritized only;
    DQN passes its taken actions' Q as both)."""
    p = state.priorities
    if p is not None:
        td_priority(device, q1, q2, target, p.priority)
        priority_update(
            device,
            p.sum_tree,
            p.min_tree,
            p.max_priority,
            p.index,
            p.priority,
            config.priority_alpha,
            config.priority_eps,
        )


def after_warmup(device: Device, config: Any, state: Any, learn: Callable[[Device], None]) -> None:
    """``learn(device)`` once warm-up is over, every ``config.train_freq`` env steps."""

    def every_train_freq(device: Device) -> None:
        f = config.train_freq
        if f == 1:  # decided while tracing: the default step has no test for it
            learn(device)
        else:
            when(device, Every(state.step, f, (config.warmup_steps + f - 1) % f), learn)

    when(device, Below(state.step, config.warmup_steps), None, every_train_freq)


def delayed(config: Any, state: Any) -> Every:
    """The condition of every ``config.policy_delay``-th update (actor, targets, temperature)."""
    period = config.policy_delay * config.train_freq
    return Every(state.step, period, (config.warmup_steps + period - 1) % period)


def native_step(device: Device, collect: Collect, update: Update, config: Any, env: Any, state: Any) -> None:
    """One step of a native env and one learning update, fused whole."""
    env_now = state.env_state
    collect(device, config, state, env_now.obs)
    replay_row(device, env, state, state.transition.obs)
    env_step(device, env, env_now, state.action)
    # the next observation as stored: the step's own (before resets replace it), critic's added
    next_obs = (
        env_now.obs
        if getattr(state, "critic_observation", None) is None
        else replay_row(device, env, state, state.transition.next_obs)
    )
    _mark_new(device, config, state, state.action.shape[0])
    replay_add(
        device,
        state.replay,
        state.transition.obs,
        state.action,
        env_now.reward,
        next_obs,
        env_now.terminated,
        env_now.truncated,
    )
    track_episodes(device, state.episodes, env_now.reward, env_now.terminated, env_now.truncated, state.step)
    env_reset_done(device, env, env_now, state.rng)
    update(device, config, state)
    increment(device, state.step)


def store(device: Device, update: Update, config: Any, state: Any) -> None:
    """Store ``state.transition`` (written by the driver from a Python-stepped env), then learn."""
    transition = state.transition
    _mark_new(device, config, state, state.action.shape[0])
    replay_add(
        device,
        state.replay,
        transition.obs,
        state.action,
        transition.reward,
        transition.next_obs,
        transition.terminated,
        transition.truncated,
    )
    track_episodes(device, state.episodes, transition.reward, transition.terminated, transition.truncated, state.step)
    update(device, config, state)
    increment(device, state.step)


def check_iteration(state: Any) -> None:
    """TD3's, SAC's and DQN's ``check_iteration``: nothing to check between iterations (the
    divergence check runs inside the fused steps)."""


def validate_checkpoint(state: Any, values: checkpoint.FieldValues, context: dict[str, Any]) -> None:
    """Checkpoint invariants of a TD3/SAC state (its ``validate_checkpoint``): every step stored
    ``num_envs`` transitions, so the step fixes the replay buffer's size and position, and no
    more episodes ended than env steps were taken."""
    config = context.get("config")
    if config is None:
        return
    n = config.num_envs
    step = values.require("step", 0, config.total_steps // n, "environment steps per env, within total_steps")
    written, capacity = step * n, state.replay.capacity
    for field, expected in (("replay.size", min(written, capacity)), ("replay.position", written % capacity)):
        if values.scalar(field) != expected:
            values.refuse(
                field,
                f"= {values.scalar(field)} does not match step {step}: {step} steps × {n} envs "
                f"into {capacity} rows give {expected}",
            )
    values.require("episodes.count", 0, written, "episodes finished, at most one per env step")
    for net in ("actor", "critic1", "critic2", "log_alpha"):  # trained by Adam: at most one update per step
        for name, _ in checkpoint.named_arrays(getattr(state, net, None), f"{net}."):
            if name.endswith(".t."):
                values.require(name[:-1], 0, step, "Adam steps, at most one per env step")


def prepare_resume(state: Any, arrays: dict[str, np.ndarray], config: Any) -> None:
    """A TD3/SAC state's change of a checkpoint's arrays before a resume restores them (its
    ``prepare_resume``): a run resumed with a larger total budget gets a larger replay buffer
    (capacity defaults to total steps). That is exact while the old buffer has never wrapped:
    rows keep their places."""
    capacity, num_envs = state.replay.capacity, config.num_envs
    old = arrays.get("replay.obs")
    if old is None or old.ndim != 2 or old.shape[0] >= capacity:
        return
    size = int(arrays["replay.size"][0])
    if int(arrays["replay.position"][0]) != size % old.shape[0]:
        raise CheckpointError("checkpoint replay buffer is inconsistent (position vs size)")
    written = int(arrays["step"][0]) * num_envs
    if written > old.shape[0]:
        raise CheckpointError(
            f"cannot grow a replay buffer that has wrapped ({written} transitions "
            f"written into {old.shape[0]} rows); resume with the original total_steps"
        )
    for field in ("obs", "action", "reward", "next_obs", "terminated", "truncated"):
        key = f"replay.{field}"
        grown = np.zeros((capacity, *arrays[key].shape[1:]), arrays[key].dtype)
        grown[: old.shape[0]] = arrays[key]
        arrays[key] = grown
    arrays["replay.position"] = np.array([size], np.int64)
