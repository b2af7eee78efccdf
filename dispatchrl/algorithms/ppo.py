"""PPO (Schulman et al. 2017) with GAE, observation normalisation and the adaptive learning rate
of the RLtools paper (appendix F), written once over generic functions; the device decides the rest.

Per iteration: N envs × T steps of rollout with a diagonal Gaussian policy (state-independent,
learned log-std) on a Box action space, or a categorical policy over the actor's logits on a
Discrete one, storing normalised observations, actions, log-probs, values and the value of
each true next observation (the final observation where an episode was truncated); then GAE
with partial-episode bootstrapping over the (T, N) rollout, and ``epochs`` passes of shuffled
minibatches, each one clipped-surrogate + entropy step for the actor and one MSE step for the
critic (Adam, one learning rate for both as in RLtools, adapted from the KL between the rollout
policy and the current one, or annealed linearly over the run; optionally the joint gradient
norm clipped, and the critic's targets scaled by the returns' running std, as Tianshou's PPO).
Native envs (Pendulum) run the whole rollout as one fused kernel per device; other envs are
stepped from Python between two fused halves of each step.
"""

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import checkpoint
from ..arrays import Array, asarray, assign, reshaped, to_numpy, zeros
from ..checkpoint import SCRATCH
from ..data import (
    EpisodeLog,
    ObsStats,
    Rollout,
    TensorDict,
    minibatch,
    obs_stats,
    rollout,
    transitions,
)
from ..devices import Device
from ..envs import EnvState, env_reset_done, env_step
from ..envs.registry import mujoco_env
from ..errors import DIVERGENCE_HINT, ConfigError, TrainingDiverged
from ..kernels.core.api import adam_step, copy, fill, increment, linear_schedule, mse_gradient
from ..kernels.offpolicy.api import track_episodes
from ..kernels.onpolicy.api import (
    NORMALIZE_EPS,
    adaptive_learning_rate,
    categorical_sample,
    explained_variance,
    gae,
    gather_minibatch,
    gaussian_sample,
    normalize_observations,
    ppo_categorical_gradient,
    ppo_policy_gradient,
    random_permutation,
    rollout_store,
    running_stats_update,
    scale_by_running_std,
)
from ..kernels.random.api import rng
from ..nn import (
    MLP,
    MLPBuffers,
    Parameter,
    PolicyHead,
    backward,
    clip_gradient_norm,
    forward,
    head_policy,
    make_buffers,
    orthogonal_init,
    parameter,
    parameter_groups,
)
from ..spaces import Box, Discrete, Space, as_action_space
from ..staging import Every, when
from . import memory
from .acting import head_action
from .config import (
    ACTIVATION,
    CHECK_EVERY,
    FINITE,
    FLAG,
    HIDDEN,
    NETWORK,
    POSITIVE,
    POSITIVE_INT,
    ROLE_NETWORK,
    UNIT_INTERVAL,
    Rule,
    network_constructors,
    validate_fields,
)
from .divergence import trained_quantities
from .protocol import Schedule

__all__ = [
    "ACTION_SPACES",
    "LR_SCHEDULES",
    "MUJOCO",
    "NAME",
    "Config",
    "State",
    "act",
    "ant_config",
    "build",
    "cartpole_config",
    "check_iteration",
    "collect",
    "config_for",
    "memory_estimate",
    "native_step",
    "policy",
    "policy_head",
    "prepare_update",
    "record_step",
    "schedule",
    "store",
    "update",
    "watched",
]

NAME = "ppo"
#: Config.lr_schedule's values
LR_SCHEDULES = ("constant", "linear")
#: the action spaces it takes (others are refused before anything is built)
ACTION_SPACES: tuple[type, ...] = (Box, Discrete)


# ---------------------------------------------------------------- hyperparameters

LR_SCHEDULE = Rule(lambda v: v in LR_SCHEDULES, " or ".join(repr(v) for v in LR_SCHEDULES))
MAX_GRAD_NORM = Rule(
    lambda v: isinstance(v, (int, float)) and bool(np.isfinite(v)) and v >= 0, "a number >= 0 (0 turns clipping off)"
)
LR_FACTOR = Rule(lambda v: isinstance(v, (int, float)) and bool(np.isfinite(v)) and v >= 1, "a number >= 1")


@dataclass
class Config:
    """Defaults: Pendulum, as the RLtools zoo's PPO (with 64 envs × 128 steps)."""

    total_steps: int = POSITIVE_INT(5_242_880)  # 640 iterations of 64 × 128 steps
    num_envs: int = POSITIVE_INT(64)  # parallel environments
    steps_per_env: int = POSITIVE_INT(128)  # T: rollout length per env and iteration
    batch_size: int = POSITIVE_INT(1024)  # minibatch rows; must divide num_envs × steps_per_env
    epochs: int = POSITIVE_INT(1)  # passes over the rollout per iteration
    hidden: tuple[int, ...] = HIDDEN((32, 32))  # hidden layer widths of the actor and critic
    activation: str = ACTIVATION("tanh")  # hidden activation: relu, tanh or gelu
    network: str = NETWORK("mlp")  # actor and value network's constructor (nn.NETWORKS name or "module:function")
    actor_network: str | None = ROLE_NETWORK(None)  # the actor's constructor; wins over network (None: network's)
    critic_network: str | None = ROLE_NETWORK(None)
    """the value network's constructor; wins over network (None: network's)"""
    gamma: float = UNIT_INTERVAL(0.9)  # discount factor
    lam: float = UNIT_INTERVAL(0.95)  # GAE λ
    clip: float = POSITIVE(0.2)  # PPO ratio clip ε
    entropy_coef: float = FINITE(0.1)  # weight of the entropy bonus
    initial_std: float = POSITIVE(2.0)  # initial std of the Gaussian policy (its log is trained)
    lr: float = POSITIVE(1e-3)  # Adam learning rate (the initial one with adaptive_lr)
    adam_eps: float = POSITIVE(1e-7)  # TensorFlow's Adam default, as RLtools
    normalize_advantage: bool = FLAG(True)  # per minibatch
    normalize_observations: bool = FLAG(True)  # by running mean and std
    adaptive_lr: bool = FLAG(False)  # adapt lr to keep the KL near kl_target
    kl_target: float = POSITIVE(0.008)  # the KL adaptive_lr aims at
    lr_factor: float = LR_FACTOR(1.5)  # adaptive_lr multiplies or divides lr by this
    lr_min: float = POSITIVE(1e-6)  # adaptive_lr's lower bound
    lr_max: float = POSITIVE(1e-2)  # adaptive_lr's upper bound
    lr_schedule: str = LR_SCHEDULE("constant")  # or "linear": lr·(1 - i/I) in iteration i of I (Tianshou's lr_decay)
    max_grad_norm: float = MAX_GRAD_NORM(0.0)
    """clip the joint gradient norm of actor and critic (clip_grad_norm_); 0: off"""
    normalize_returns: bool = FLAG(False)  # the critic learns returns / their running std (Tianshou's rew_norm)
    orthogonal_init: bool = FLAG(False)  # orthogonal weights (gain √2, the actor's output × 0.01), zero biases
    recompute_advantage: bool = FLAG(False)  # each epoch after the first: V and GAE again with the current critic
    check_every: int = CHECK_EVERY(1000)  # divergence check (NaN/inf) every this many steps/updates; 0: off

    def validate(self) -> None:
        validate_fields(self)
        rows = self.num_envs * self.steps_per_env
        if rows % self.batch_size:
            raise ConfigError(
                f"Config.batch_size ({self.batch_size}) must divide the rollout's num_envs × "
                f"steps_per_env = {self.num_envs} × {self.steps_per_env} = {rows} rows"
            )
        if self.total_steps < rows:
            raise ConfigError(
                f"Config.total_steps ({self.total_steps}) must be >= one rollout (num_envs × steps_per_env = {rows})"
            )
        if self.adaptive_lr and self.lr_schedule != "constant":
            raise ConfigError(
                f"Config.lr_schedule ({self.lr_schedule!r}) and adaptive_lr both set the learning rate: choose one"
            )
        if self.lr_min > self.lr_max:
            raise ConfigError(f"Config.lr_min ({self.lr_min}) must be <= lr_max ({self.lr_max})")

    @property
    def minibatches(self) -> int:
        return self.num_envs * self.steps_per_env // self.batch_size

    @property
    def iterations(self) -> int:
        return self.total_steps // (self.num_envs * self.steps_per_env)


def ant_config() -> Config:
    """Ant-v5: RLtools' PPO Ant configuration (paper figure 3, appendix F)."""
    return Config(
        total_steps=1_000_000,
        num_envs=64,
        steps_per_env=64,
        batch_size=2048,
        epochs=4,
        hidden=(256, 256),
        activation="relu",
        gamma=0.99,
        lam=0.95,
        clip=0.2,
        entropy_coef=0.0,
        initial_std=0.5,
        lr=3e-4,
        normalize_advantage=False,
        normalize_observations=True,
        adaptive_lr=True,
    )


def cartpole_config() -> Config:
    """CartPole-v1: the rl-zoo's PPO hyperparameters (its ``lin_0.001`` learning rate; the clip
    range constant where it anneals it too) with Stable-Baselines3's defaults it relies on (64 × 64
    tanh networks, Adam ε, ``max_grad_norm`` 0.5). Annealing and clipping: seeds 0-9 all evaluate
    at 500 on AVX-512 and on AVX2, against a worst seed of 319.9 / 448.6 without them (NOTES.md)."""
    return Config(
        total_steps=100_000,
        num_envs=8,
        steps_per_env=32,
        batch_size=256,
        epochs=20,
        hidden=(64, 64),
        gamma=0.98,
        lam=0.8,
        entropy_coef=0.0,
        lr=1e-3,
        lr_schedule="linear",
        max_grad_norm=0.5,
        adam_eps=1e-5,
        normalize_observations=False,
    )


def config_for(env: object) -> Config:
    """The per-env default configuration (its training budget included): on HalfCheetah, Hopper,
    Walker2d and Humanoid v5, Tianshou's MuJoCo PPO (:data:`MUJOCO`)."""
    name = env.lower() if isinstance(env, str) else ""
    if name in ("ant", "ant-v5", "dispatchrl/ant-v5"):
        return ant_config()
    if mujoco_env(env) in ("halfcheetah", "hopper", "walker2d", "humanoid"):
        return dataclasses.replace(MUJOCO)
    if name in ("cartpole", "cartpole-v1", "dispatchrl/cartpole-v1"):
        return cartpole_config()
    return Config()


# Tianshou's defaults, thu-ml/tianshou examples/mujoco/mujoco_ppo.py (get_args, test_ppo),
# rew_norm, lr_decay, max_grad_norm and the orthogonal init included. Not carried over: vf_coef
# 0.25 (one loss for actor and critic there; here the critic has its own MSE step, and with Adam
# the weight matters only through the joint grad-norm clip and ε: here the critic's gradient
# counts 4× in the joint norm), recompute_adv (GAE again before each of the 10 passes: here the
# option recompute_advantage, off, since 2 seeds did not separate it: Hopper max 3652.6 ± 44.4
# against 3428.6 ± 69.8, HalfCheetah 5912.1 ± 1035.6 against 6289.9 ± 560.7) and the obs_norm
# wrapper's clip of normalised observations to ±10. Matched:
# value_clip 0 and dual_clip None (ours has neither), bound_action_method "clip" (ours clips to
# [-1, 1] before rescaling to the bounds too), the state-independent log std (unbounded=True).
# Against ant_config() (RLtools' Ant): a 64 × 64 tanh net rather than 256 × 256 ReLU; a 2048-row
# rollout (8 envs × 256 steps) in 32 minibatches of 64, 10 passes, rather than 4096 rows (64 × 64)
# in 2 of 2048, 4 passes; a linearly decaying lr rather than the KL-adapted one; initial std
# e^-0.5 rather than 0.5; torch's Adam ε; 3M steps rather than 1M. γ, λ, clip, no entropy bonus,
# no advantage normalisation and observation normalisation are the same.
MUJOCO = Config(
    total_steps=3_000_000,  # epoch 100 × step_per_epoch 30000 (whole rollouts: 1464 of 2048 steps here, 15 per epoch there)
    num_envs=8,  # training_num
    steps_per_env=256,  # step_per_collect 2048 / 8 envs
    batch_size=64,
    epochs=10,  # repeat_per_collect
    hidden=(64, 64),  # hidden_sizes, nn.Tanh in actor and critic
    activation="tanh",
    gamma=0.99,
    lam=0.95,  # gae_lambda
    clip=0.2,  # eps_clip
    entropy_coef=0.0,  # ent_coef
    initial_std=float(np.exp(-0.5)),  # sigma_param initialised to log std -0.5
    lr=3e-4,
    adam_eps=1e-8,  # torch.optim.Adam's default
    normalize_advantage=False,  # norm_adv 0
    normalize_observations=True,  # make_mujoco_env(obs_norm=True): running mean and std
    adaptive_lr=False,
    lr_schedule="linear",  # lr_decay
    max_grad_norm=0.5,
    normalize_returns=True,  # rew_norm
    orthogonal_init=True,
)


# ---------------------------------------------------------------- state


@dataclass
class State:
    actor: MLP  # observation → Gaussian mean (normalised action units), or a Discrete's logits
    critic: MLP  # observation → V
    log_std: Parameter | None  # (A,): the Gaussian's state-independent log std (None: categorical)
    actor_act: MLPBuffers = field(metadata=SCRATCH)  # actor buffers, N rows (acting)
    critic_act: MLPBuffers = field(metadata=SCRATCH)  # critic buffers, N rows: V(s_t)
    critic_next: MLPBuffers = field(metadata=SCRATCH)  # critic buffers, N rows: V(s_{t+1})
    actor_train: MLPBuffers = field(metadata=SCRATCH)  # actor buffers, B rows (d_output takes the policy gradient)
    critic_train: MLPBuffers = field(metadata=SCRATCH)
    obs_stats: ObsStats  # running observation mean/variance
    obs_norm: Array = field(metadata=SCRATCH)  # (N) normalised observation the policy acts on
    next_obs_norm: Array = field(metadata=SCRATCH)  # (N, O) normalised true next observation
    action: Array = field(metadata=SCRATCH)  # (N, A) sampled actions (unclipped)
    log_prob: Array = field(metadata=SCRATCH)  # (N,)
    rollout: Rollout = field(metadata=SCRATCH)
    batch: TensorDict = field(metadata=SCRATCH)  # B rows of the rollout (Minibatch's keys)
    permutation: Array  # (T·N,) int64 shuffled row order of the current epoch
    old_log_std: Array | None  # (A,) log-std the rollout was sampled with (for the KL)
    update_stats: Array  # (4,) float64: KL, surrogate, entropy, clip fraction of the last minibatch
    learning_rate: Array  # (1,) float64: Adam's learning rate (adapted or annealed in the fused step)
    grad_norm: Array = field(metadata=SCRATCH)  # (1,) float64: the squared joint gradient norm (max_grad_norm)
    return_stats: ObsStats | None  # running mean and variance of the GAE returns (normalize_returns)
    return_var: Array | None = field(metadata=SCRATCH)  # (1,) float64: their variance before this rollout
    returns_rows: Array | None = field(metadata=SCRATCH)  # the rollout's returns as (T·N, 1) rows, same memory
    explained_variance: Array  # (1,) float64: of the value function over the last rollout (logging)
    next_obs_rows: Array | None = field(metadata=SCRATCH)  # (T·N, O) normalised true next observations
    critic_rollout: MLPBuffers | None = field(metadata=SCRATCH)  # critic buffers, T·N rows (recompute_advantage)
    transition: TensorDict = field(metadata=SCRATCH)  # the current transition, N rows (Python-stepped envs)
    episodes: EpisodeLog | None  # attached by the driver (its ring sized for the driver's chunks)
    rng: Array
    step: Array  # int64 (1,): environment steps taken (per env)
    updates: Array  # int64 (1,): minibatch updates done
    env_state: EnvState | None = None

    def validate_checkpoint(self, values, context):
        """Checkpoints are taken between iterations: the step is a whole number of rollouts, the
        update counter matches it, and ``permutation`` is a permutation of the rollout's rows."""
        config = context.get("config")
        if config is None:
            return
        t = config.steps_per_env
        step = values.require("step", 0, config.iterations * t, "environment steps per env, within total_steps")
        if step % t:
            values.refuse("step", f"= {step} is not a whole number of rollouts of {t} steps")
        updates = step // t * config.epochs * config.minibatches
        values.require("updates", updates, updates, f"{config.epochs} × {config.minibatches} updates per rollout")
        for net in ("actor", "critic", "log_std"):  # one Adam step per minibatch update
            for name, _ in checkpoint.named_arrays(getattr(self, net) or [], f"{net}."):
                if name.endswith(".t."):
                    values.require(name[:-1], updates, updates, "Adam steps: one per minibatch update")
        rows = values["permutation"].shape[0]
        if updates and not np.array_equal(np.sort(values["permutation"]), np.arange(rows)):
            values.refuse("permutation", f"is not a permutation of 0..{rows - 1}")
        values.require("episodes.count", 0, step * config.num_envs, "episodes finished, at most one per env step")
        rate = values.scalar("learning_rate")
        if not rate > 0:  # Adam with a zero or negative rate would stall or climb the loss
            values.refuse("learning_rate", f"= {rate} is not a positive learning rate")

    def resumed_with(self, config: "Config", saved: dict) -> None:
        """A resumed run whose ``lr`` differs from the checkpoint's (``--override``) restarts the
        state's learning rate (the adapted one with adaptive_lr) at the new ``lr``."""
        if saved.get("lr") != config.lr:
            assign(self.learning_rate, np.array([config.lr], np.float64))


def build(device: Device, config: Config, obs_dim: int, action_space: Space | int, seed: int) -> State:
    """The whole PPO training state on ``device``: actor and value networks, optimiser moments, running
    observation statistics, the rollout, minibatch buffers, RNG stream and counters."""
    space = as_action_space(action_space)
    envs, rows = config.num_envs, config.batch_size
    action_dim = space.columns  # a Discrete's index is one column
    outputs = space.n if isinstance(space, Discrete) else action_dim  # logits, or Gaussian means
    make_actor, make_critic = network_constructors(config)
    actor = make_actor(device, (obs_dim, *config.hidden, outputs), config.activation, "identity", seed=seed * 8)
    critic = make_critic(device, (obs_dim, *config.hidden, 1), config.activation, "identity", seed=seed * 8 + 1)
    if config.orthogonal_init:  # Tianshou's and CleanRL's MuJoCo PPO: near-zero initial means
        orthogonal_init(actor, np.sqrt(2), 0.01 * np.sqrt(2), seed * 8 + 2)
        orthogonal_init(critic, np.sqrt(2), np.sqrt(2), seed * 8 + 3)
    log_std = None
    if isinstance(space, Box):
        log_std = parameter(device, action_dim)
        fill(device, log_std.value, float(np.log(config.initial_std)))
    stored = rollout(device, config.steps_per_env, envs, obs_dim, action_dim, mean_dim=outputs)
    return State(
        actor=actor,
        critic=critic,
        log_std=log_std,
        actor_act=make_buffers(device, actor, envs),
        critic_act=make_buffers(device, critic, envs),
        critic_next=make_buffers(device, critic, envs),
        actor_train=make_buffers(device, actor, rows),
        critic_train=make_buffers(device, critic, rows),
        obs_stats=obs_stats(device, obs_dim),
        obs_norm=zeros(device, (envs, obs_dim)),
        next_obs_norm=zeros(device, (envs, obs_dim)),
        action=zeros(device, (envs, action_dim)),
        log_prob=zeros(device, envs),
        rollout=stored,
        batch=minibatch(device, rows, obs_dim, action_dim, mean_dim=outputs),
        permutation=zeros(device, envs * config.steps_per_env, np.int64),
        old_log_std=None if log_std is None else zeros(device, action_dim),
        update_stats=zeros(device, 4, np.float64),
        learning_rate=asarray(device, np.array([config.lr], np.float64)),
        grad_norm=zeros(device, 1, np.float64),
        return_stats=obs_stats(device, 1) if config.normalize_returns else None,
        return_var=zeros(device, 1, np.float64) if config.normalize_returns else None,
        returns_rows=reshaped(stored.returns, (stored.returns.size, 1)) if config.normalize_returns else None,
        explained_variance=zeros(device, 1, np.float64),
        next_obs_rows=zeros(device, (envs * config.steps_per_env, obs_dim)) if config.recompute_advantage else None,
        critic_rollout=make_buffers(device, critic, envs * config.steps_per_env)
        if config.recompute_advantage
        else None,
        transition=transitions(device, envs, obs_dim, action_dim),
        episodes=None,
        rng=rng(device, seed),
        step=zeros(device, 1, np.int64),
        updates=zeros(device, 1, np.int64),
    )


# ---------------------------------------------------------------- rollout


def normalize(device: Device, config: Config, state: State, obs: Array, out: Array) -> None:
    """``out`` ← ``obs`` normalised by the running statistics (as they stand), or copied."""
    if not config.normalize_observations:
        copy(device, obs, out)
        return
    normalize_observations(device, state.obs_stats, obs, out)


def act(device: Device, config: Config, state: State, obs: Array, action: Array, deterministic: bool = False) -> None:
    """Write the action for ``obs`` (normalised by the running statistics) into ``action``: the
    policy head's (``deterministic``: the Gaussian mean clipped to [-1, 1], or the most likely
    index) or a ~ π(·|s) (its log-probability into ``state.log_prob``)."""
    normalize(device, config, state, obs, state.obs_norm)
    forward(device, state.actor, state.actor_act, state.obs_norm)
    if deterministic:
        head_action(device, _squash(state), state.actor_act.output, action)
    elif state.log_std is None:  # a Discrete action space: categorical over the logits
        categorical_sample(device, state.rng, state.actor_act.output, action, state.log_prob)
    else:
        gaussian_sample(device, state.rng, state.actor_act.output, state.log_std.value, action, state.log_prob)


def collect(device: Device, config: Config, state: State, obs: Array) -> None:
    """Training's acting: observe (update the running statistics), sample ``state.action`` and V(s)."""
    if config.normalize_observations:
        running_stats_update(device, state.obs_stats, obs)
    act(device, config, state, obs, state.action)
    forward(device, state.critic, state.critic_act, state.obs_norm)


def record_step(
    device: Device, config: Config, state: State, next_obs: Array, reward: Array, terminated: Array, truncated: Array
) -> None:
    """V of the true next observation, then the step goes into the rollout and the episode log."""
    normalize(device, config, state, next_obs, state.next_obs_norm)
    forward(device, state.critic, state.critic_next, state.next_obs_norm)
    targets = [(state.rollout, state.obs_norm)]
    if state.next_obs_rows is not None:  # recompute_advantage: the next observations in the same rows, same kernel
        targets.append((dataclasses.replace(state.rollout, obs=state.next_obs_rows), state.next_obs_norm))
    for target, obs in targets:
        rollout_store(
            device,
            target,
            state.step,
            obs,
            state.action,
            state.actor_act.output,
            state.log_prob,
            state.critic_act.output,
            state.critic_next.output,
            reward,
            terminated,
            truncated,
        )
    track_episodes(device, state.episodes, reward, terminated, truncated, state.step)
    increment(device, state.step)


def native_step(device: Device, config: Config, env: Any, state: State) -> None:
    """One step of a native env, fused whole: act, env step, record, reset the finished envs."""
    env_now = state.env_state
    assert env_now is not None, "the driver attaches the native env's state"
    collect(device, config, state, env_now.obs)
    env_step(device, env, env_now, state.action)
    record_step(device, config, state, env_now.obs, env_now.reward, env_now.terminated, env_now.truncated)
    env_reset_done(device, env, env_now, state.rng)


def store(device: Device, config: Config, state: State) -> None:
    """Record ``state.transition``, written by the driver from a Python-stepped env."""
    transition = state.transition
    record_step(
        device, config, state, transition.next_obs, transition.reward, transition.terminated, transition.truncated
    )


# ---------------------------------------------------------------- update


def prepare_update(device: Device, config: Config, state: State) -> None:
    """Compute the rollout's GAE advantages and returns before the iteration's updates, and
    the iteration's learning rate where it is annealed."""
    if config.lr_schedule == "linear":  # updates = i·U at iteration i's first update, of I·U in all
        total = config.iterations * config.epochs * config.minibatches
        linear_schedule(device, state.updates, total, config.lr, 0.0, state.learning_rate)
    advantages(device, config, state)
    if state.log_std is not None and state.old_log_std is not None:
        copy(device, state.log_std.value, state.old_log_std)


def recompute_advantages(device: Device, config: Config, state: State) -> None:
    """Tianshou's recompute_adv: before each epoch after the first, V(s_t) and V(s_{t+1}) of the
    whole rollout from the critic as it is now, then GAE (and the return statistics) again."""
    stored, buffers = state.rollout, state.critic_rollout
    assert buffers is not None and state.next_obs_rows is not None, "built with recompute_advantage"
    rows = (stored.value.size, 1)
    forward(device, state.critic, buffers, stored.obs)
    copy(device, buffers.output, reshaped(stored.value, rows))
    forward(device, state.critic, buffers, state.next_obs_rows)
    copy(device, buffers.output, reshaped(stored.next_value, rows))
    advantages(device, config, state)


def advantages(device: Device, config: Config, state: State) -> None:
    """GAE advantages and returns of the rollout from its stored values (with normalize_returns:
    values in return-std units scaled back, the statistics updated, the returns scaled)."""
    stored = state.rollout
    returns_stats = state.return_stats
    if returns_stats is not None:  # Tianshou's rew_norm: the critic's values are in units of the returns' std
        copy(device, returns_stats.var, state.return_var)
        scale_by_running_std(device, state.return_var, stored.value, divide=False)
        scale_by_running_std(device, state.return_var, stored.next_value, divide=False)
    gae(
        device,
        stored.reward,
        stored.value,
        stored.next_value,
        stored.terminated,
        stored.truncated,
        config.gamma,
        config.lam,
        stored.advantage,
        stored.returns,
    )
    explained_variance(device, stored.value, stored.returns, state.explained_variance)
    if returns_stats is not None:  # the statistics take the returns in env units, the critic learns them scaled
        running_stats_update(device, returns_stats, state.returns_rows)
        scale_by_running_std(device, state.return_var, stored.returns, divide=True)


def update(device: Device, config: Config, state: State) -> None:
    """One minibatch step; ``epochs × minibatches`` of them make an iteration's update. The first
    computes GAE, the first of each epoch reshuffles."""
    per_epoch = config.minibatches
    recompute = None
    if config.recompute_advantage:  # the first update of every later epoch
        recompute = lambda device: when(  # noqa: E731
            device, Every(state.updates, per_epoch), lambda device: recompute_advantages(device, config, state)
        )
    when(
        device,
        Every(state.updates, per_epoch * config.epochs),
        lambda device: prepare_update(device, config, state),
        recompute,
    )
    when(
        device, Every(state.updates, per_epoch), lambda device: random_permutation(device, state.rng, state.permutation)
    )
    batch = state.batch
    gather_minibatch(device, state.rollout, state.permutation, state.updates, batch)
    # actor: clipped surrogate + entropy through the policy head (Gaussian or categorical), then the MLP
    forward(device, state.actor, state.actor_train, batch.obs)
    if state.log_std is None or state.old_log_std is None:
        ppo_categorical_gradient(
            device,
            state.actor_train.output,
            batch.action,
            batch.log_prob,
            batch.advantage,
            batch.mean,  # the rollout's logits
            config.clip,
            config.entropy_coef,
            config.normalize_advantage,
            state.actor_train.d_output,
            state.update_stats,
        )
    else:
        ppo_policy_gradient(
            device,
            state.actor_train.output,
            state.log_std.value,
            batch.action,
            batch.log_prob,
            batch.advantage,
            batch.mean,
            state.old_log_std,
            config.clip,
            config.entropy_coef,
            config.normalize_advantage,
            state.actor_train.d_output,
            state.log_std.grad,
            state.update_stats,
        )
    if config.adaptive_lr:
        adaptive_learning_rate(
            device,
            state.update_stats,
            state.learning_rate,
            config.kl_target,
            config.lr_factor,
            config.lr_min,
            config.lr_max,
        )
    backward(device, state.actor, state.actor_train, batch.obs, state.actor_train.d_output)
    # critic: regression on the GAE returns
    forward(device, state.critic, state.critic_train, batch.obs)
    mse_gradient(device, state.critic_train.output, batch.returns, state.critic_train.d_output)
    backward(device, state.critic, state.critic_train, batch.obs, state.critic_train.d_output)
    log_std = () if state.log_std is None else (state.log_std,)
    groups = (*parameter_groups(state.actor), *log_std, *parameter_groups(state.critic))
    if config.max_grad_norm:
        clip_gradient_norm(device, groups, state.grad_norm, config.max_grad_norm)
    for p in groups:
        adam_step(device, p.value, p.grad, p.m, p.v, p.t, state.learning_rate, 0.9, 0.999, config.adam_eps)
    increment(device, state.updates)


# ---------------------------------------------------------------- the driver's entry points


def schedule(config: Config) -> Schedule:
    """A rollout of ``steps_per_env`` steps of every env, then ``epochs × minibatches`` updates."""
    return Schedule(env_steps=config.steps_per_env, updates=config.epochs * config.minibatches)


def check_iteration(state: State) -> None:
    """Refuse a rollout whose observations were not finite (the statistics update skipped them):
    a divergence when the policy's weights or actions are not finite either (the env only
    passed the diverged policy's NaN on), else the env's fault."""
    bad = int(to_numpy(state.obs_stats.nonfinite)[0])
    if bad:
        diverged = next(
            (name for name, a in [*watched(state), ("action", state.action)] if not np.all(np.isfinite(to_numpy(a)))),
            None,
        )
        if diverged is not None:
            envs, rollout_steps = state.action.shape[0], state.rollout.reward.shape[0]
            last = int(to_numpy(state.step)[0]) * envs
            first = max(0, last - rollout_steps * envs)
            raise TrainingDiverged(
                f"training diverged: {diverged} became NaN or inf between step {first} and {last} (the env "
                f"then saw NaN or inf actions); training stopped. Hint: {DIVERGENCE_HINT}",
                diverged,
                first,
                last,
            )
        raise ConfigError(
            f"observation normalization: the env returned NaN or inf observations "
            f"({bad} refused statistics update(s)); check the environment"
        )


def policy_head(state: State) -> PolicyHead:
    """The deterministic action, on observations normalised by the run's statistics: the
    Gaussian mean mapped affinely from [-1, 1] onto the bounds and clipped, or a categorical
    policy's most likely index."""
    mean = to_numpy(state.obs_stats.mean).astype(np.float32)
    std = np.sqrt(to_numpy(state.obs_stats.var) + NORMALIZE_EPS).astype(np.float32)
    return PolicyHead(state.actor, _squash(state), obs_mean=mean, obs_std=std)


def _squash(state: State) -> str:
    return "clip" if state.log_std is not None else "argmax"


#: the large buffers :func:`build` and the driver will allocate (checked before they are)
memory_estimate = memory.ppo_allocations


def watched(state: State) -> list[tuple[str, Array]]:
    """What the divergence check reads of ``state``, most likely cause first: the losses' target,
    then the networks' parameters (the driver adds the observation and reward)."""
    return [("PPO losses (KL, surrogate, entropy)", state.update_stats), *trained_quantities(state)]


def policy(state: State, action_low: Any, action_high: Any) -> Callable[[np.ndarray], np.ndarray]:
    """The deterministic policy: the Gaussian mean, rescaled from [-1, 1] to the env's bounds
    (folded into the last layer of an MLP; after the network's own deployable policy for any
    other network) and clipped, on normalised observations."""
    return head_policy(policy_head(state), Box(action_low, action_high))
