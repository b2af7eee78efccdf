"""TD3 (Fujimoto et al. 2018) written once over generic functions; the device decides the rest.

Per environment step: act (uniform random during warm-up, then actor + Gaussian noise), store
the transition, and after warm-up train the twin critics on a replay batch every ``train_freq``
steps (1: every step) and the actor and the target networks every ``policy_delay``-th time.
:func:`native_step` fuses all of it, env included, into one compiled kernel per device for
native envs.
"""

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..arrays import Array, zeros
from ..checkpoint import SCRATCH
from ..data import EpisodeLog, ReplayRing, TensorDict
from ..devices import Device
from ..envs import EnvState, Pendulum
from ..envs.multirotor import Multirotor
from ..envs.registry import NAMED_ENVS, mujoco_env
from ..kernels.core.api import copy, fill, mse_gradient
from ..kernels.offpolicy.api import (
    accumulate_actor_stats,
    accumulate_critic_stats,
    add_clipped_noise,
    concat_columns,
    slice_columns,
    td_target,
)
from ..kernels.random.api import random_uniform
from ..nn import PolicyHead, backward, forward, head_policy, make_buffers, polyak_average
from ..spaces import Box, as_action_space
from ..staging import Below, when
from . import memory, offpolicy
from .acting import head_act
from .config import FLAG, NON_NEGATIVE, NON_NEGATIVE_INT, POSITIVE_INT, OffPolicyConfig, network_constructors
from .divergence import trained_quantities
from .protocol import Schedule

__all__ = [
    "ACTION_SPACES",
    "MUJOCO",
    "MULTIROTOR",
    "NAME",
    "Config",
    "State",
    "act",
    "build",
    "check_iteration",
    "collect",
    "config_for",
    "memory_estimate",
    "native_step",
    "policy",
    "policy_head",
    "schedule",
    "store",
    "update",
    "update_actor",
    "update_critics",
    "update_targets",
    "watched",
]

NAME = "td3"
#: the action spaces it takes (others are refused before anything is built)
ACTION_SPACES: tuple[type, ...] = (Box,)


# ---------------------------------------------------------------- hyperparameters


@dataclass
class Config(OffPolicyConfig):
    """Defaults: the RLtools paper's Pendulum benchmark (and the TD3 paper)."""

    policy_delay: int = POSITIVE_INT(2)  # actor and target updates every 2nd step
    exploration_noise: float = NON_NEGATIVE(0.1)  # std of the Gaussian noise on acting actions (in [-1, 1] units)
    target_noise: float = NON_NEGATIVE(0.2)  # std of the target policy smoothing noise
    target_noise_clip: float = NON_NEGATIVE(0.5)  # the smoothing noise is clipped to ±this
    random_warmup: bool = FLAG(True)
    """uniform random actions during warm-up (SB3); False: the actor plus noise (RLtools)"""
    delay_critic_targets: bool = FLAG(True)  # critic targets move with the actor's (SB3); False: every update (RLtools)
    actor_warmup_steps: int = NON_NEGATIVE_INT(0)
    """steps (counted as warmup_steps) before the first actor update (RLtools l2f: 30k)"""


def config_for(env: object) -> Config:
    """The default configuration for ``env``; on Pendulum γ = 0.98, rl-zoo's TD3 value. With 0.99
    the critics' targets span a 100-step horizon and at 10k steps 8 of seeds 0–99 evaluated below
    −400 on Zen 3 (slow learners and short collapses at the last step, seed 0 among them), with
    0.98 4 of 100 (NOTES.md, "The first result"). On the multirotor: the recipe of "Learning to
    Fly in Seconds" (:data:`MULTIROTOR`); on HalfCheetah, Hopper, Walker2d and Humanoid v5:
    Tianshou's MuJoCo TD3 (:data:`MUJOCO`)."""
    cls = NAMED_ENVS.get(env.lower()) if isinstance(env, str) else type(env)
    if cls is Multirotor:
        return dataclasses.replace(MULTIROTOR)
    if mujoco_env(env) in ("halfcheetah", "hopper", "walker2d", "humanoid"):
        return dataclasses.replace(MUJOCO)
    return Config(gamma=0.98) if cls is Pendulum else Config()


#: "Learning to Fly in Seconds" (RLtools learning-to-fly, src/config): 300k steps of one env,
#: tanh 64×64 actor and critics, batch 256, a critic update every 10 steps and an actor update every
#: 20, the critics' targets after every critic update, γ 0.99, 15k warm-up steps, the actor from
#: 30k, critics on the privileged observation (asymmetric), Adam weight decay 1e-4 (RLtools':
#: decoupled, weights only; on 2 seeds it raised eval_success 0.00/0.01 to 0.27/0.03 and the
#: hover score 0.50/0.52 to 0.64/0.63). Not carried over: the replay rewards recomputed at each
#: curriculum stage.
MULTIROTOR = Config(
    total_steps=300_000,
    warmup_steps=15_000,
    batch_size=256,
    hidden=(64, 64),
    activation="tanh",
    gamma=0.99,
    train_freq=10,
    policy_delay=2,
    delay_critic_targets=False,
    actor_warmup_steps=30_000,
    asymmetric_critic=True,
    weight_decay=1e-4,
)


# Tianshou's defaults, thu-ml/tianshou examples/mujoco/mujoco_td3.py (get_args):
MUJOCO = Config(
    total_steps=1_000_000,  # epoch 200 × epoch_num_steps 5000
    warmup_steps=25_000,  # start_timesteps, uniform random actions (random=True)
    batch_size=256,
    hidden=(256, 256),  # ReLU (Net's default)
    replay_capacity=None,  # buffer_size 1M = total_steps; None keeps short runs from allocating 1M rows
    actor_lr=3e-4,
    critic_lr=3e-4,
    gamma=0.99,
    polyak=0.995,  # tau 0.005
    exploration_noise=0.1,  # × max_action there: the same in our [-1, 1] action units
    target_noise=0.2,  # policy_noise
    target_noise_clip=0.5,  # noise_clip
    policy_delay=2,  # update_actor_freq (targets move with the actor, as delay_critic_targets=True)
    train_freq=1,  # collection_step_num_env_steps 1, update_per_step 1
    num_envs=1,  # num_train_envs
    n_step=1,
)


# ---------------------------------------------------------------- state


@dataclass
class State:
    # networks are made by config's actor and critic constructors (nn.MLP by default) and used
    # through dispatchrl.nn's network functions, with buffers from nn.make_buffers
    actor: Any
    critic1: Any
    critic2: Any
    actor_target: Any
    critic1_target: Any
    critic2_target: Any
    actor_act: Any = field(metadata=SCRATCH)  # actor buffers, N rows (acting)
    # B-row buffers, shared by the target and online nets of a kind: their uses never overlap,
    # and a smaller working set stays in cache
    actor_batch: Any = field(metadata=SCRATCH)
    critic1_batch: Any = field(metadata=SCRATCH)  # keeps the input gradient, for the actor update
    critic2_batch: Any = field(metadata=SCRATCH)
    critic_input: Array = field(metadata=SCRATCH)  # (B, O + A) [obs, action] rows, refilled before each use
    q_target: Array = field(metadata=SCRATCH)  # (B, 1)
    d_action: Array = field(metadata=SCRATCH)  # (B, A) ∂(−mean Q)/∂action
    replay: ReplayRing
    batch: TensorDict = field(metadata=SCRATCH)  # B rows sampled from the replay buffer (Transitions' keys)
    transition: TensorDict = field(metadata=SCRATCH)  # the current transition, N rows
    action: Array = field(metadata=SCRATCH)  # (N, A) in [-1, 1]
    episodes: EpisodeLog | None  # attached by the driver (its ring sized for the driver's chunks)
    rng: Array
    step: Array  # int64 (1,): environment steps taken (per env)
    # running float64 sums for logging (never reset, never read by training):
    critic_stats: Array  # (3,) [critic updates, Σ critic loss (MSE1 + MSE2), Σ mean Q]
    actor_stats: Array  # (2,) [actor updates, Σ actor loss (−mean Q1(s, π(s)))]
    env_state: EnvState | None = None
    priorities: offpolicy.Priorities | None = None  # config.prioritized
    n_step: offpolicy.NStepBatch | None = None  # config.n_step > 1
    critic_observation: offpolicy.CriticObservation | None = field(default=None, metadata=SCRATCH)

    validate_checkpoint = offpolicy.validate_checkpoint
    prepare_resume = offpolicy.prepare_resume


def build(
    device: Device, config: Config, obs_dim: int, action_space: Box | int, seed: int, critic_obs_dim: int | None = None
) -> State:
    """The whole TD3 training state on ``device``: actor, twin critics and their targets, optimiser moments,
    replay ring, batch and acting buffers, RNG stream and counters, for ``obs_dim`` → the Box's components
    (with ``asymmetric_critic``, the critics see the env's ``critic_obs_dim`` columns instead)."""
    action_dim = as_action_space(action_space).columns
    envs, rows = config.num_envs, config.batch_size
    asymmetric = offpolicy.critic_observation(device, config, obs_dim, critic_obs_dim)
    critic_obs = obs_dim if asymmetric is None else asymmetric.critic.shape[1]
    stored_obs = obs_dim if asymmetric is None else obs_dim + critic_obs  # replay rows
    actor_sizes = (obs_dim, *config.hidden, action_dim)
    critic_sizes = (critic_obs + action_dim, *config.hidden, 1)

    make_actor, make_critic = network_constructors(config)

    def actor_net(trainable: bool = True) -> Any:
        return make_actor(device, actor_sizes, config.activation, "tanh", seed=seed * 8, trainable=trainable)

    def critic_net(k: int, trainable: bool = True) -> Any:
        return make_critic(device, critic_sizes, config.activation, "identity", seed=seed * 8 + k, trainable=trainable)

    actor, critic1, critic2 = actor_net(), critic_net(1), critic_net(2)
    return State(
        actor=actor,
        critic1=critic1,
        critic2=critic2,
        actor_target=actor_net(trainable=False),
        critic1_target=critic_net(1, trainable=False),
        critic2_target=critic_net(2, trainable=False),
        actor_act=make_buffers(device, actor, envs),
        actor_batch=make_buffers(device, actor, rows),
        critic1_batch=make_buffers(device, critic1, rows, input_gradient=True),
        critic2_batch=make_buffers(device, critic2, rows),
        critic_input=zeros(device, (rows, critic_obs + action_dim)),
        q_target=zeros(device, (rows, 1)),
        d_action=zeros(device, (rows, action_dim)),
        actor_stats=zeros(device, 2, np.float64),
        critic_observation=asymmetric,
        **offpolicy.replay_fields(device, config, stored_obs, action_dim, seed),
    )


# ---------------------------------------------------------------- acting


def act(device: Device, config: Config, state: State, obs: Array, action: Array, deterministic: bool = False) -> None:
    """Write the action for ``obs`` into ``action``: the actor's tanh output (``deterministic``), or as
    training explores: uniform in [-1, 1] during warm-up (with ``random_warmup``), then the actor's
    output plus clipped Gaussian exploration noise."""
    if deterministic:
        head_act(device, policy_head(state), state.actor_act, obs, action)
        return

    def explore(device: Device) -> None:
        forward(device, state.actor, state.actor_act, obs)
        copy(device, state.actor_act.output, action)
        add_clipped_noise(device, state.rng, action, config.exploration_noise, None, -1.0, 1.0)

    if not config.random_warmup:
        explore(device)
        return
    when(
        device,
        Below(state.step, config.warmup_steps),
        lambda device: random_uniform(device, state.rng, action, -1.0, 1.0),
        explore,
    )


def collect(device: Device, config: Config, state: State, obs: Array) -> None:
    """Training's acting: ``state.action`` for ``obs``, exploring."""
    act(device, config, state, obs, state.action)


# ---------------------------------------------------------------- learning


def update_critics(device: Device, config: Config, state: State) -> None:
    """One gradient step of both critics towards the clipped double-Q target on the sampled batch."""
    batch = state.batch
    offpolicy.sample_batch(device, config, state)
    # target: r + γ(1 − terminated) min_i Q'_i(s', clip(π'(s') + clip(ε, ±c), −1, 1))
    forward(device, state.actor_target, state.actor_batch, offpolicy.actor_rows(device, state, batch.next_obs))
    add_clipped_noise(
        device, state.rng, state.actor_batch.output, config.target_noise, config.target_noise_clip, -1.0, 1.0
    )
    next_critic_obs = offpolicy.critic_rows(device, state, batch.next_obs)
    concat_columns(device, next_critic_obs, state.actor_batch.output, state.critic_input)
    targets = ((state.critic1_target, state.critic1_batch), (state.critic2_target, state.critic2_batch))
    offpolicy.each_critic(
        device, targets, lambda device, net, buffers: forward(device, net, buffers, state.critic_input)
    )
    reward, gamma = offpolicy.target_reward_and_gamma(config, state)
    td_target(
        device,
        reward,
        batch.terminated,
        state.critic1_batch.output,
        state.critic2_batch.output,
        gamma,
        state.q_target,
    )
    offpolicy.bootstrap(device, state, state.q_target)
    concat_columns(device, offpolicy.critic_rows(device, state, batch.obs), batch.action, state.critic_input)

    def update_critic(device: Device, critic: Any, buffers: Any) -> None:
        forward(device, critic, buffers, state.critic_input)
        mse_gradient(device, buffers.output, state.q_target, buffers.d_output)
        offpolicy.weight_gradient(device, state, buffers.d_output)
        backward(device, critic, buffers, state.critic_input, buffers.d_output, input_gradient=False)
        offpolicy.optimize(device, config, critic, config.critic_lr)

    offpolicy.each_critic(
        device, ((state.critic1, state.critic1_batch), (state.critic2, state.critic2_batch)), update_critic
    )
    q1, q2 = state.critic1_batch.output, state.critic2_batch.output  # the batch's Q before this update
    accumulate_critic_stats(device, q1, q2, state.q_target, state.critic_stats)
    offpolicy.update_priorities(device, config, state, q1, q2, state.q_target)


def update_actor(device: Device, config: Config, state: State) -> None:
    """One gradient step of the actor, maximising Q1(s, π(s)) on the sampled batch."""
    # maximise Q1(s, π(s)): backpropagate −1/B through critic 1 into the action, then the actor
    obs, critic_buffers = offpolicy.actor_rows(device, state, state.batch.obs), state.critic1_batch
    critic_obs = offpolicy.critic_rows(device, state, state.batch.obs)
    forward(device, state.actor, state.actor_batch, obs)
    concat_columns(device, critic_obs, state.actor_batch.output, state.critic_input)
    forward(device, state.critic1, critic_buffers, state.critic_input)
    accumulate_actor_stats(device, critic_buffers.output, state.actor_stats)
    fill(device, critic_buffers.d_output, -1.0 / config.batch_size)
    backward(device, state.critic1, critic_buffers, state.critic_input, critic_buffers.d_output, parameters=False)
    slice_columns(device, critic_buffers.d_in[0], critic_obs.shape[1], state.d_action)
    backward(device, state.actor, state.actor_batch, obs, state.d_action)
    offpolicy.optimize(device, config, state.actor, config.actor_lr)


def update_targets(device: Device, config: Config, state: State, networks: str = "all") -> None:
    """Polyak-average target networks towards the online ones: ``"all"``, ``"actor"`` or ``"critics"``."""
    pairs = {
        "actor": ((state.actor, state.actor_target),),
        "critics": ((state.critic1, state.critic1_target), (state.critic2, state.critic2_target)),
    }
    for online, target in pairs["actor"] + pairs["critics"] if networks == "all" else pairs[networks]:
        polyak_average(device, target, online, config.polyak)


def update(device: Device, config: Config, state: State) -> None:
    """After warm-up, every train_freq steps: a gradient step of the critics, and of the actor and
    targets every policy_delay-th time (the actor not before ``actor_warmup_steps``; the critics'
    targets every time without ``delay_critic_targets``)."""

    def actor_updates(device: Device) -> None:
        update_actor(device, config, state)
        update_targets(device, config, state, "actor")

    def delayed_updates(device: Device) -> None:
        if config.actor_warmup_steps > config.warmup_steps:  # decided while tracing, as the default step has no test
            when(device, Below(state.step, config.actor_warmup_steps), None, actor_updates)
        else:
            actor_updates(device)
        if config.delay_critic_targets:
            update_targets(device, config, state, "critics")

    def learn(device: Device) -> None:
        update_critics(device, config, state)
        if not config.delay_critic_targets:  # RLtools: critic targets after every critic update
            update_targets(device, config, state, "critics")
        when(device, offpolicy.delayed(config, state), delayed_updates)

    offpolicy.after_warmup(device, config, state, learn)


# ---------------------------------------------------------------- the driver's entry points


def schedule(config: Config) -> Schedule:
    """The driver's schedule: one env step per call, its update fused into it."""
    return Schedule(env_steps=1, updates=0)  # the update is fused into every env step


def native_step(device: Device, config: Config, env: Any, state: State) -> None:
    """One fused step on a native env: act, step the env, store the transition, update."""
    offpolicy.native_step(device, collect, update, config, env, state)


def store(device: Device, config: Config, state: State) -> None:
    """Record ``state.transition`` (written by the driver from a Python-stepped env), then update."""
    offpolicy.store(device, update, config, state)


check_iteration = offpolicy.check_iteration


def policy_head(state: State) -> PolicyHead:
    """The deterministic action: the tanh actor's output itself."""
    return PolicyHead(state.actor, "tanh")


def memory_estimate(
    config: Config, obs_dim: int, action_dim: int, episodes: int, critic_obs_dim: int | None
) -> list[memory.Allocation]:
    """The large buffers :func:`build` and the driver will allocate (checked before they are)."""
    return memory.off_policy_allocations(config, obs_dim, action_dim, episodes, critic_obs_dim, sac=False)


def watched(state: State) -> list[tuple[str, Array]]:
    """What the divergence check reads of ``state``, most likely cause first: the losses' target,
    then the networks' parameters (the driver adds the observation and reward)."""
    return [("TD target (critic loss)", state.q_target), *trained_quantities(state)]


def policy(state: State, action_low: Any, action_high: Any) -> Callable[[np.ndarray], np.ndarray]:
    """The deterministic host policy: the actor's tanh output rescaled to ``[action_low, action_high]``."""
    return head_policy(policy_head(state), Box(action_low, action_high))
