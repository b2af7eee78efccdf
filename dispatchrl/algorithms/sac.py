"""SAC (Haarnoja et al. 2018) with twin critics, a tanh-squashed Gaussian actor and automatic
entropy tuning (target entropy −|A|), written once over generic functions.

Per gradient step, in Stable-Baselines3's order: sample a replay batch and fresh actions
a ~ π(·|s); update the temperature α; build the soft TD target from the target critics on
a' ~ π(·|s'); update both critics; update the actor through min(Q1, Q2)(s, a); move the target
critics by Polyak averaging. :func:`native_step` fuses all of it, env included.
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
from ..envs import EnvState
from ..envs.registry import mujoco_env
from ..kernels.core.api import adam_step, fill, mse_gradient
from ..kernels.offpolicy.api import (
    accumulate_critic_stats,
    accumulate_sac_actor_stats,
    concat_columns,
    entropy_temperature_gradient,
    gaussian_tanh_backward,
    gaussian_tanh_sample,
    select_min_rows,
    slice_columns,
    soft_td_target,
)
from ..kernels.random.api import random_uniform
from ..nn import (
    MLP,
    MLPBuffers,
    Parameter,
    PolicyHead,
    backward,
    forward,
    head_policy,
    make_buffers,
    parameter,
    polyak_average,
)
from ..spaces import Box, as_action_space
from ..staging import Below, when
from . import memory, offpolicy
from .acting import head_act
from .config import FLAG, POSITIVE, OffPolicyConfig, Rule, network_constructors
from .divergence import trained_quantities
from .protocol import Schedule

__all__ = [
    "ACTION_SPACES",
    "MUJOCO",
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
    "update_temperature",
    "watched",
]

NAME = "sac"
#: the action spaces it takes (others are refused before anything is built)
ACTION_SPACES: tuple[type, ...] = (Box,)


# ---------------------------------------------------------------- hyperparameters

TARGET_ENTROPY = Rule(lambda v: v is None or bool(np.isfinite(v)), "None or a finite number")


@dataclass
class Config(OffPolicyConfig):
    alpha_lr: float = POSITIVE(1e-3)  # Adam learning rate of log α (the temperature)
    initial_alpha: float = POSITIVE(0.2)  # the SAC paper's temperature; tuned from there with auto_alpha
    target_entropy: float | None = TARGET_ENTROPY(None)  # None: −action_dim
    auto_alpha: bool = FLAG(True)  # tune α towards target_entropy (SB3's ent_coef="auto"); False: α fixed


def config_for(env: object) -> Config:
    """The default configuration for ``env``: :data:`MUJOCO` (Tianshou's MuJoCo SAC) on
    HalfCheetah, Hopper, Walker2d and Humanoid v5, else :class:`Config`'s."""
    if mujoco_env(env) in ("halfcheetah", "hopper", "walker2d", "humanoid"):
        return dataclasses.replace(MUJOCO)
    return Config()


# Tianshou's defaults, thu-ml/tianshou examples/mujoco/mujoco_sac.py (get_args):
MUJOCO = Config(
    total_steps=1_000_000,  # epoch 200 × step_per_epoch 5000
    warmup_steps=10_000,  # start_timesteps, uniform random actions (random=True)
    batch_size=256,
    hidden=(256, 256),  # ReLU (Net's default)
    replay_capacity=None,  # buffer_size 1M = total_steps; None keeps short runs from allocating 1M rows
    actor_lr=1e-3,
    critic_lr=1e-3,
    gamma=0.99,
    polyak=0.995,  # tau 0.005
    initial_alpha=0.2,  # alpha
    auto_alpha=False,  # auto_alpha (off there by default: the table's α is fixed)
    alpha_lr=3e-4,  # alpha_lr (used with --auto-alpha)
    train_freq=1,  # step_per_collect 1, update_per_step 1
    num_envs=1,  # training_num
    n_step=1,
)


# ---------------------------------------------------------------- state


@dataclass
class State:
    actor: MLP  # outputs [mean, log_std]
    critic1: MLP
    critic2: MLP
    critic1_target: MLP
    critic2_target: MLP
    log_alpha: Parameter  # (1,): the temperature, trained by Adam
    actor_act: MLPBuffers = field(metadata=SCRATCH)  # actor buffers, N rows
    actor_train: MLPBuffers = field(
        metadata=SCRATCH
    )  # actor buffers, B rows (its d_output takes the Gaussian head's gradient)
    actor_next: MLPBuffers = field(metadata=SCRATCH)  # actor buffers, B rows, on next observations
    critic1_train: MLPBuffers = field(metadata=SCRATCH)
    critic2_train: MLPBuffers = field(metadata=SCRATCH)
    critic1_next: MLPBuffers = field(metadata=SCRATCH)  # target critics' buffers, on next observations
    critic2_next: MLPBuffers = field(metadata=SCRATCH)
    critic1_actor: MLPBuffers = field(metadata=SCRATCH)  # critics on the policy's actions, with input gradients
    critic2_actor: MLPBuffers = field(metadata=SCRATCH)
    act_noise: Array = field(metadata=SCRATCH)  # (N, A) ε, action and log π for acting ...
    act_log_prob: Array = field(metadata=SCRATCH)  # (N, 1)
    pi_noise: Array = field(metadata=SCRATCH)  # (B, A) ... for the actor update on the batch ...
    pi_action: Array = field(metadata=SCRATCH)  # (B, A)
    pi_log_prob: Array = field(metadata=SCRATCH)  # (B, 1)
    next_noise: Array = field(metadata=SCRATCH)  # (B, A) ... and for the target on next observations
    next_action: Array = field(metadata=SCRATCH)  # (B, A)
    next_log_prob: Array = field(metadata=SCRATCH)  # (B, 1)
    critic_input: Array = field(metadata=SCRATCH)  # (B, O + A) [obs, action] of the batch
    critic_next_input: Array = field(metadata=SCRATCH)  # (B, O + A) [next_obs, a']
    actor_critic_input: Array = field(metadata=SCRATCH)  # (B, O + A) [obs, a]
    d_critic_input: Array = field(metadata=SCRATCH)  # (B, O + A) gradient of −mean min(Q1, Q2) w.r.t. [obs, action]
    d_action: Array = field(metadata=SCRATCH)  # (B, A)
    q_target: Array = field(metadata=SCRATCH)  # (B, 1)
    replay: ReplayRing
    batch: TensorDict = field(metadata=SCRATCH)  # B rows sampled from the replay buffer (Transitions' keys)
    transition: TensorDict = field(metadata=SCRATCH)  # the current transition, N rows
    action: Array = field(metadata=SCRATCH)  # (N, A) in [-1, 1]
    episodes: EpisodeLog | None  # attached by the driver (its ring sized for the driver's chunks)
    rng: Array
    step: Array  # int64 (1,): environment steps taken (per env)
    # running float64 sums for logging (never reset, never read by training):
    critic_stats: Array  # (3,) [critic updates, Σ critic loss (MSE1 + MSE2), Σ mean Q]
    actor_stats: Array  # (3,) [actor updates, Σ actor loss (mean(α log π − min Q)), Σ entropy (−mean log π)]
    env_state: EnvState | None = None
    priorities: offpolicy.Priorities | None = None  # config.prioritized
    n_step: offpolicy.NStepBatch | None = None  # config.n_step > 1
    critic_observation: offpolicy.CriticObservation | None = field(default=None, metadata=SCRATCH)

    validate_checkpoint = offpolicy.validate_checkpoint
    prepare_resume = offpolicy.prepare_resume


def build(
    device: Device, config: Config, obs_dim: int, action_space: Box | int, seed: int, critic_obs_dim: int | None = None
) -> State:
    """The whole SAC training state on ``device``: Gaussian actor, twin critics and their targets, the
    temperature, optimiser moments, replay ring, buffers, RNG stream and counters (with
    ``asymmetric_critic``, the critics see the env's ``critic_obs_dim`` columns)."""
    action_dim = as_action_space(action_space).columns
    envs, rows = config.num_envs, config.batch_size
    asymmetric = offpolicy.critic_observation(device, config, obs_dim, critic_obs_dim)
    critic_obs = obs_dim if asymmetric is None else asymmetric.critic.shape[1]
    stored_obs = obs_dim if asymmetric is None else obs_dim + critic_obs  # replay rows
    actor_sizes = (obs_dim, *config.hidden, 2 * action_dim)
    critic_sizes = (critic_obs + action_dim, *config.hidden, 1)

    make_actor, make_critic = network_constructors(config)

    def net(make: Callable[..., Any], sizes: tuple[int, ...], k: int) -> Any:
        return make(device, sizes, config.activation, "identity", seed=seed * 8 + k)

    actor = net(make_actor, actor_sizes, 0)
    critic1, critic2 = net(make_critic, critic_sizes, 1), net(make_critic, critic_sizes, 2)
    log_alpha = parameter(device, (1,))
    fill(device, log_alpha.value, float(np.log(config.initial_alpha)))
    critic_width = critic_obs + action_dim
    return State(
        actor=actor,
        critic1=critic1,
        critic2=critic2,
        critic1_target=net(make_critic, critic_sizes, 1),
        critic2_target=net(make_critic, critic_sizes, 2),
        log_alpha=log_alpha,
        actor_act=make_buffers(device, actor, envs),
        actor_train=make_buffers(device, actor, rows),
        actor_next=make_buffers(device, actor, rows),
        critic1_train=make_buffers(device, critic1, rows),
        critic2_train=make_buffers(device, critic2, rows),
        critic1_next=make_buffers(device, critic1, rows),
        critic2_next=make_buffers(device, critic2, rows),
        critic1_actor=make_buffers(device, critic1, rows, input_gradient=True),
        critic2_actor=make_buffers(device, critic2, rows, input_gradient=True),
        act_noise=zeros(device, (envs, action_dim)),
        act_log_prob=zeros(device, (envs, 1)),
        pi_noise=zeros(device, (rows, action_dim)),
        pi_action=zeros(device, (rows, action_dim)),
        pi_log_prob=zeros(device, (rows, 1)),
        next_noise=zeros(device, (rows, action_dim)),
        next_action=zeros(device, (rows, action_dim)),
        next_log_prob=zeros(device, (rows, 1)),
        critic_input=zeros(device, (rows, critic_width)),
        critic_next_input=zeros(device, (rows, critic_width)),
        actor_critic_input=zeros(device, (rows, critic_width)),
        d_critic_input=zeros(device, (rows, critic_width)),
        d_action=zeros(device, (rows, action_dim)),
        q_target=zeros(device, (rows, 1)),
        actor_stats=zeros(device, 3, np.float64),
        critic_observation=asymmetric,
        **offpolicy.replay_fields(device, config, stored_obs, action_dim, seed),
    )


# ---------------------------------------------------------------- acting


def act(device: Device, config: Config, state: State, obs: Array, action: Array, deterministic: bool = False) -> None:
    """Write the action for ``obs`` into ``action``: tanh of the Gaussian's mean (``deterministic``), or as
    training explores: uniform in [-1, 1] during warm-up, then a tanh-squashed sample of the actor's Gaussian."""
    if deterministic:
        head_act(device, policy_head(state), state.actor_act, obs, action)
        return

    def explore(device: Device) -> None:
        forward(device, state.actor, state.actor_act, obs)
        gaussian_tanh_sample(device, state.rng, state.actor_act.output, state.act_noise, action, state.act_log_prob)

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


def update_temperature(device: Device, config: Config, state: State) -> None:
    """One gradient step of log α towards the target entropy (−action_dim unless configured)."""
    target_entropy = -state.pi_action.shape[1] if config.target_entropy is None else config.target_entropy
    log_alpha = state.log_alpha
    entropy_temperature_gradient(device, state.pi_log_prob, target_entropy, log_alpha.grad)
    adam_step(device, log_alpha.value, log_alpha.grad, log_alpha.m, log_alpha.v, log_alpha.t, config.alpha_lr)


def update_critics(device: Device, config: Config, state: State) -> None:
    """One gradient step of both critics towards the soft double-Q target on the sampled batch."""
    # soft target: r + γ(1 − terminated)(min_i Q'_i(s', a') − α log π(a'|s')), a' ~ π(·|s')
    batch = state.batch
    forward(device, state.actor, state.actor_next, offpolicy.actor_rows(device, state, batch.next_obs))
    gaussian_tanh_sample(
        device, state.rng, state.actor_next.output, state.next_noise, state.next_action, state.next_log_prob
    )
    next_critic_obs = offpolicy.critic_rows(device, state, batch.next_obs)
    concat_columns(device, next_critic_obs, state.next_action, state.critic_next_input)
    targets = ((state.critic1_target, state.critic1_next), (state.critic2_target, state.critic2_next))
    offpolicy.each_critic(
        device, targets, lambda device, net, buffers: forward(device, net, buffers, state.critic_next_input)
    )
    reward, gamma = offpolicy.target_reward_and_gamma(config, state)
    soft_td_target(
        device,
        reward,
        batch.terminated,
        state.critic1_next.output,
        state.critic2_next.output,
        state.next_log_prob,
        state.log_alpha.value,
        gamma,
        state.q_target,
    )
    offpolicy.bootstrap(device, state, state.q_target)
    concat_columns(device, offpolicy.critic_rows(device, state, batch.obs), batch.action, state.critic_input)

    def update_critic(device: Device, critic: Any, buffers: Any) -> None:
        forward(device, critic, buffers, state.critic_input)
        mse_gradient(device, buffers.output, state.q_target, buffers.d_output)
        offpolicy.weight_gradient(device, state, buffers.d_output)
        backward(device, critic, buffers, state.critic_input, buffers.d_output)
        offpolicy.optimize(device, config, critic, config.critic_lr)

    offpolicy.each_critic(
        device, ((state.critic1, state.critic1_train), (state.critic2, state.critic2_train)), update_critic
    )
    q1, q2 = state.critic1_train.output, state.critic2_train.output  # the batch's Q before this update
    accumulate_critic_stats(device, q1, q2, state.q_target, state.critic_stats)
    offpolicy.update_priorities(device, config, state, q1, q2, state.q_target)


def update_actor(device: Device, config: Config, state: State) -> None:
    """One gradient step of the actor, minimising mean(α log π(a|s) − min(Q1, Q2)(s, a))."""
    # minimise mean(α log π(a|s) − min(Q1, Q2)(s, a)) through the reparameterised sample a
    critic_obs = offpolicy.critic_rows(device, state, state.batch.obs)
    concat_columns(device, critic_obs, state.pi_action, state.actor_critic_input)

    def critic_input_gradient(device: Device, critic: Any, buffers: Any) -> None:
        forward(device, critic, buffers, state.actor_critic_input)
        fill(device, buffers.d_output, -1.0 / config.batch_size)
        backward(device, critic, buffers, state.actor_critic_input, buffers.d_output, parameters=False)

    pairs = ((state.critic1, state.critic1_actor), (state.critic2, state.critic2_actor))
    offpolicy.each_critic(device, pairs, critic_input_gradient)
    accumulate_sac_actor_stats(
        device,
        state.critic1_actor.output,
        state.critic2_actor.output,
        state.pi_log_prob,
        state.log_alpha.value,
        state.actor_stats,
    )
    select_min_rows(
        device,
        state.critic1_actor.output,
        state.critic2_actor.output,
        state.critic1_actor.d_in[0],
        state.critic2_actor.d_in[0],
        state.d_critic_input,
    )
    slice_columns(device, state.d_critic_input, critic_obs.shape[1], state.d_action)
    gaussian_tanh_backward(
        device,
        state.actor_train.output,
        state.pi_noise,
        state.pi_action,
        state.d_action,
        state.log_alpha.value,
        state.actor_train.d_output,
    )
    # the actor's columns again: the target's forward on next observations reused their scratch
    obs = offpolicy.actor_rows(device, state, state.batch.obs)
    backward(device, state.actor, state.actor_train, obs, state.actor_train.d_output)
    offpolicy.optimize(device, config, state.actor, config.actor_lr)


def update_targets(device: Device, config: Config, state: State) -> None:
    """Polyak-average the target critics towards the online critics."""
    for online, target in ((state.critic1, state.critic1_target), (state.critic2, state.critic2_target)):
        polyak_average(device, target, online, config.polyak)


def update(device: Device, config: Config, state: State) -> None:
    """One gradient step after warm-up, every train_freq steps (temperature and actor every
    policy_delay-th)."""

    def learn(device: Device) -> None:
        offpolicy.sample_batch(device, config, state)
        forward(device, state.actor, state.actor_train, offpolicy.actor_rows(device, state, state.batch.obs))
        gaussian_tanh_sample(
            device, state.rng, state.actor_train.output, state.pi_noise, state.pi_action, state.pi_log_prob
        )
        delayed = offpolicy.delayed(config, state)
        if config.auto_alpha:  # decided while tracing: a fixed α traces no temperature step
            when(device, delayed, lambda device: update_temperature(device, config, state))
        update_critics(device, config, state)
        when(device, delayed, lambda device: update_actor(device, config, state))
        update_targets(device, config, state)

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
    """The deterministic action: tanh of the Gaussian's mean, the first half of the actor's
    [mean, log_std] output."""
    return PolicyHead(state.actor, "tanh_mean", columns=state.action.shape[1])


def memory_estimate(
    config: Config, obs_dim: int, action_dim: int, episodes: int, critic_obs_dim: int | None
) -> list[memory.Allocation]:
    """The large buffers :func:`build` and the driver will allocate (checked before they are)."""
    return memory.off_policy_allocations(config, obs_dim, action_dim, episodes, critic_obs_dim, sac=True)


def watched(state: State) -> list[tuple[str, Array]]:
    """What the divergence check reads of ``state``, most likely cause first: the losses' target,
    then the networks' parameters (the driver adds the observation and reward)."""
    return [("TD target (critic loss)", state.q_target), *trained_quantities(state)]


def policy(state: State, action_low: Any, action_high: Any) -> Callable[[np.ndarray], np.ndarray]:
    """The deterministic policy tanh(mean): the actor's last layer cut to its mean columns (an
    MLP), or the mean columns of the network's own deployable policy (any other network)."""
    return head_policy(policy_head(state), Box(action_low, action_high))
