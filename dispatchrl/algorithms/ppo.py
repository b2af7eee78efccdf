"""PPO (Schulman et al. 2017) with GAE, observation normalisation and the adaptive learning rate
of the RLtools paper (appendix F), written once over generic functions; the device decides the rest.

Per iteration: N envs × T steps of rollout with a diagonal Gaussian policy (state-independent,
learned log-std), storing normalised observations, actions, log-probs, values and the value of
each true next observation (the final observation where an episode was truncated); then GAE
with partial-episode bootstrapping over the (T, N) rollout, and ``epochs`` passes of shuffled
minibatches, each one clipped-surrogate + entropy step for the actor and one MSE step for the
critic (Adam, one learning rate for both as in RLtools, adapted from the KL between the rollout
policy and the current one). Native envs (Pendulum) run the whole rollout as one fused kernel
per device; other envs are stepped from Python between two fused halves of each step.
"""

import sys
import time
from dataclasses import dataclass

import numpy as np

from .. import checkpoint
from ..arrays import assign, asarray, to_numpy, zeros
from ..data import episode_log, transitions
from ..envs import env_reset_done, env_step
from ..errors import ConfigError
from ..kernels.api import copy, fill, increment, mse_gradient, rng
from ..kernels.ppo import (adam_step_scheduled, adaptive_learning_rate, gae, gather_minibatch, gaussian_sample,
                           minibatch, normalize_observations, obs_stats, ppo_policy_gradient, random_permutation,
                           rollout, rollout_store, running_stats_update)
from ..kernels.ppo.api import NORMALIZE_EPS
from ..kernels.rl.api import track_episodes
from ..nn import Policy, mlp, mlp_backward, mlp_buffers, mlp_forward, parameter
from ..staging import Every, fuse, when
from . import common


@dataclass
class Config:
    """Defaults: Pendulum, as the RLtools zoo's PPO (with 64 envs × 128 steps)."""

    total_steps: int = 5_242_880       # 640 iterations of 64 × 128 steps
    num_envs: int = 64
    steps_per_env: int = 128           # T: rollout length per env and iteration
    batch_size: int = 1024             # minibatch rows; must divide num_envs × steps_per_env
    epochs: int = 1
    hidden: tuple = (32, 32)
    activation: str = "tanh"
    gamma: float = 0.9
    lam: float = 0.95                  # GAE λ
    clip: float = 0.2
    entropy_coef: float = 0.1
    initial_std: float = 2.0
    lr: float = 1e-3
    adam_eps: float = 1e-7             # TensorFlow's Adam default, as RLtools
    normalize_advantage: bool = True   # per minibatch
    normalize_observations: bool = True
    adaptive_lr: bool = False
    kl_target: float = 0.008
    lr_factor: float = 1.5
    lr_min: float = 1e-6
    lr_max: float = 1e-2

    def validate(self):
        flag = (lambda v: isinstance(v, (bool, np.bool_)), "True or False")
        common.validate_fields(self, {
            "total_steps": (common.positive_int, "a positive int"),
            "num_envs": (common.positive_int, "a positive int"),
            "steps_per_env": (common.positive_int, "a positive int"),
            "batch_size": (common.positive_int, "a positive int"),
            "epochs": (common.positive_int, "a positive int"),
            "hidden": (lambda v: len(v) >= 1 and all(common.positive_int(h) for h in v), "a tuple of positive ints"),
            "activation": (lambda v: v in ("relu", "tanh", "gelu"), "'relu', 'tanh' or 'gelu'"),
            "gamma": (common.unit_interval, "in [0, 1]"),
            "lam": (common.unit_interval, "in [0, 1]"),
            "clip": (common.positive, "a positive number"),
            "entropy_coef": (lambda v: isinstance(v, (int, float)) and np.isfinite(v), "a finite number"),
            "initial_std": (common.positive, "a positive number"),
            "lr": (common.positive, "a positive number"),
            "adam_eps": (common.positive, "a positive number"),
            "normalize_advantage": flag,
            "normalize_observations": flag,
            "adaptive_lr": flag,
            "kl_target": (common.positive, "a positive number"),
            "lr_factor": (lambda v: isinstance(v, (int, float)) and np.isfinite(v) and v >= 1, "a number >= 1"),
            "lr_min": (common.positive, "a positive number"),
            "lr_max": (common.positive, "a positive number"),
        })
        rows = self.num_envs * self.steps_per_env
        if rows % self.batch_size:
            raise ConfigError(f"Config.batch_size ({self.batch_size}) must divide the rollout's num_envs × "
                              f"steps_per_env = {self.num_envs} × {self.steps_per_env} = {rows} rows")
        if self.total_steps < rows:
            raise ConfigError(f"Config.total_steps ({self.total_steps}) must be >= one rollout "
                              f"(num_envs × steps_per_env = {rows})")
        if self.lr_min > self.lr_max:
            raise ConfigError(f"Config.lr_min ({self.lr_min}) must be <= lr_max ({self.lr_max})")

    @property
    def minibatches(self):
        return self.num_envs * self.steps_per_env // self.batch_size

    @property
    def iterations(self):
        return self.total_steps // (self.num_envs * self.steps_per_env)


def ant_config():
    """Ant-v5: RLtools' PPO Ant configuration (paper figure 3, appendix F)."""
    return Config(total_steps=1_000_000, num_envs=64, steps_per_env=64, batch_size=2048, epochs=4,
                  hidden=(256, 256), activation="relu", gamma=0.99, lam=0.95, clip=0.2, entropy_coef=0.0,
                  initial_std=0.5, lr=3e-4, normalize_advantage=False, normalize_observations=True,
                  adaptive_lr=True)


def config_for(env):
    """The per-env default configuration (its training budget included)."""
    if isinstance(env, str) and env.lower() in ("ant", "ant-v5", "dispatchrl/ant-v5"):
        return ant_config()
    return Config()


@dataclass
class State:
    actor: object               # observation → Gaussian mean (normalised action units)
    critic: object              # observation → V
    log_std: object             # Parameter (A,): the state-independent log standard deviation
    actor_act: object           # actor buffers, N rows (acting)
    critic_act: object          # critic buffers, N rows: V(s_t)
    critic_next: object         # critic buffers, N rows: V(s_{t+1})
    actor_train: object         # actor buffers, B rows (d_output takes the policy gradient)
    critic_train: object
    obs_stats: object           # running observation mean/variance
    obs_norm: object            # (N, O) normalised observation the policy acts on
    next_obs_norm: object       # (N, O) normalised true next observation
    action: object              # (N, A) sampled actions (unclipped)
    log_prob: object            # (N,)
    rollout: object
    batch: object
    perm: object                # (T·N,) int64 shuffled row order of the current epoch
    old_log_std: object         # (A,) log-std the rollout was sampled with (for the KL)
    info: object                # (4,) float64: KL, surrogate, entropy, clip fraction of the last minibatch
    lr: object                  # (1,) float64: Adam's learning rate (adapted in the fused step)
    io: object                  # the current transition, N rows (Python-stepped envs)
    log: object
    rng: object
    step: object                # int64 (1,): environment steps taken (per env)
    updates: object             # int64 (1,): minibatch updates done
    env_state: object = None

    def validate_checkpoint(self, values, context):
        """Checkpoints are taken between iterations: the step is a whole number of rollouts, the
        update counter matches it, and ``perm`` is a permutation of the rollout's rows."""
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
            for name, _ in checkpoint.named_arrays(getattr(self, net), f"{net}."):
                if name.endswith(".t."):
                    values.require(name[:-1], updates, updates, "Adam steps: one per minibatch update")
        rows = values["perm"].shape[0]
        if updates and not np.array_equal(np.sort(values["perm"]), np.arange(rows)):
            values.refuse("perm", f"is not a permutation of 0..{rows - 1}")
        values.require("log.count", 0, step * config.num_envs, "episodes finished, at most one per env step")
        values.require("log.end_steps", 0, step, "steps at which episodes ended")


def build(device, config, obs_dim, action_dim, seed):
    n, b, rows = config.num_envs, config.batch_size, config.num_envs * config.steps_per_env
    actor = mlp(device, (obs_dim, *config.hidden, action_dim), config.activation, "identity", seed=seed * 8)
    critic = mlp(device, (obs_dim, *config.hidden, 1), config.activation, "identity", seed=seed * 8 + 1)
    log_std = parameter(device, action_dim)
    fill(device, log_std.value, float(np.log(config.initial_std)))
    return State(actor, critic, log_std,
                 mlp_buffers(device, actor, n), mlp_buffers(device, critic, n), mlp_buffers(device, critic, n),
                 mlp_buffers(device, actor, b), mlp_buffers(device, critic, b),
                 obs_stats(device, obs_dim), zeros(device, (n, obs_dim)), zeros(device, (n, obs_dim)),
                 zeros(device, (n, action_dim)), zeros(device, n),
                 rollout(device, config.steps_per_env, n, obs_dim, action_dim),
                 minibatch(device, b, obs_dim, action_dim), zeros(device, rows, np.int64),
                 zeros(device, action_dim), zeros(device, 4, np.float64),
                 asarray(device, np.array([config.lr], np.float64)),
                 transitions(device, n, obs_dim, action_dim), episode_log(device, n, common.EPISODE_LOG_CAPACITY),
                 rng(device, seed), zeros(device, 1, np.int64), zeros(device, 1, np.int64))


# ---------------------------------------------------------------- rollout

def normalize(device, config, s, obs, out, update):
    if not config.normalize_observations:
        copy(device, obs, out)
        return
    if update:
        running_stats_update(device, s.obs_stats, obs)
    normalize_observations(device, s.obs_stats, obs, out)


def act(device, config, s, obs):
    """Observe (update the running statistics, normalise), sample a ~ π(·|s) and V(s)."""
    normalize(device, config, s, obs, s.obs_norm, update=True)
    mlp_forward(device, s.actor, s.actor_act, s.obs_norm)
    gaussian_sample(device, s.rng, s.actor_act.output, s.log_std.value, s.action, s.log_prob)
    mlp_forward(device, s.critic, s.critic_act, s.obs_norm)


def store(device, config, s, next_obs, reward, terminated, truncated):
    """V of the true next observation, then the step goes into the rollout and the episode log."""
    normalize(device, config, s, next_obs, s.next_obs_norm, update=False)
    mlp_forward(device, s.critic, s.critic_next, s.next_obs_norm)
    rollout_store(device, s.rollout, s.step, s.obs_norm, s.action, s.actor_act.output, s.log_prob,
                  s.critic_act.output, s.critic_next.output, reward, terminated, truncated)
    track_episodes(device, s.log, reward, terminated, truncated, s.step)
    increment(device, s.step)


def native_rollout_step(device, config, env, s):
    """One step of a native env, fused whole: act, env step, store, reset the finished envs."""
    es = s.env_state
    act(device, config, s, es.obs)
    env_step(device, env, es, s.action)
    store(device, config, s, es.obs, es.reward, es.terminated, es.truncated)
    env_reset_done(device, env, es, s.rng)


def python_store(device, config, s):
    io = s.io
    store(device, config, s, io.next_obs, io.reward, io.terminated, io.truncated)


# ---------------------------------------------------------------- update

def prepare_update(device, config, s):
    r = s.rollout
    gae(device, r.reward, r.value, r.next_value, r.terminated, r.truncated, config.gamma, config.lam,
        r.advantage, r.returns)
    copy(device, s.log_std.value, s.old_log_std)


def minibatch_update(device, config, s):
    """One minibatch step; ``epochs × minibatches`` of them make an iteration's update. The first
    computes GAE, the first of each epoch reshuffles."""
    per_epoch = config.minibatches
    when(device, Every(s.updates, per_epoch * config.epochs), lambda device: prepare_update(device, config, s))
    when(device, Every(s.updates, per_epoch), lambda device: random_permutation(device, s.rng, s.perm))
    b = s.batch
    gather_minibatch(device, s.rollout, s.perm, s.updates, b)
    # actor: clipped surrogate + entropy through the Gaussian head, then the MLP
    mlp_forward(device, s.actor, s.actor_train, b.obs)
    ppo_policy_gradient(device, s.actor_train.output, s.log_std.value, b.action, b.log_prob, b.advantage, b.mean,
                        s.old_log_std, config.clip, config.entropy_coef, config.normalize_advantage,
                        s.actor_train.d_output, s.log_std.grad, s.info)
    if config.adaptive_lr:
        adaptive_learning_rate(device, s.info, s.lr, config.kl_target, config.lr_factor, config.lr_min, config.lr_max)
    mlp_backward(device, s.actor, s.actor_train, b.obs, s.actor_train.d_output)
    # critic: regression on the GAE returns
    mlp_forward(device, s.critic, s.critic_train, b.obs)
    mse_gradient(device, s.critic_train.output, b.returns, s.critic_train.d_output)
    mlp_backward(device, s.critic, s.critic_train, b.obs, s.critic_train.d_output)
    for p in (*s.actor.groups, s.log_std, *s.critic.groups):
        adam_step_scheduled(device, p.value, p.grad, p.m, p.v, p.t, s.lr, 0.9, 0.999, config.adam_eps)
    increment(device, s.updates)


# ---------------------------------------------------------------- policy and training driver

def policy(s, action_low, action_high):
    """The deterministic policy: the Gaussian mean, rescaled from [-1, 1] to the env's bounds
    (folded into the last layer) and clipped, on normalised observations."""
    low, high = np.asarray(action_low, np.float32), np.asarray(action_high, np.float32)
    half, mid = (high - low) / 2, (high + low) / 2
    weights = [to_numpy(w.value) for w in s.actor.weights]
    biases = [to_numpy(b.value) for b in s.actor.biases]
    weights[-1] = (weights[-1] * half).astype(np.float32)
    biases[-1] = (biases[-1] * half + mid).astype(np.float32)
    mean = to_numpy(s.obs_stats.mean).astype(np.float32)
    std = np.sqrt(to_numpy(s.obs_stats.var) + NORMALIZE_EPS).astype(np.float32)
    return Policy(weights, biases, s.actor.activation, s.actor.output_activation, low, high, "clip", mean, std)


def _check_observations(state):
    bad = int(to_numpy(state.obs_stats.nonfinite)[0])
    if bad:
        raise ConfigError(f"observation normalization: the env returned NaN or inf observations "
                          f"({bad} refused statistics update(s)); check the environment")


def _finite_rows(name, values):
    values = np.asarray(values)
    if not np.all(np.isfinite(values)):
        row = int(np.argwhere(~np.isfinite(values.reshape(values.shape[0], -1)))[0][0])
        raise ConfigError(f"{name}: the env returned NaN or inf (env row {row}); observation "
                          "normalization and the policy need finite values")
    return values


def train(device, env="pendulum", config=None, seed=0, progress=None, resume=None):
    """Train PPO; returns a :class:`common.TrainResult` (``.policy`` acts on numpy observations,
    ``.history``, ``.train_seconds``, ``.compile_seconds``, ``.save(path)``). ``config`` defaults
    to :func:`config_for` ``(env)``."""
    config = config if config is not None else config_for(env)
    if not isinstance(config, Config):
        raise ConfigError(f"config must be a dispatchrl.algorithms.ppo.Config, got {type(config).__name__}")
    config.validate()
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**31:
        raise ConfigError(f"seed must be an int in [0, 2**31), got {seed!r}")
    seed = int(seed)
    spec = common.resolve_env(env, config.num_envs)
    start = time.perf_counter()
    algo = sys.modules[__name__]
    state = common.build_state(algo, device, spec, config, seed)
    if resume is not None:
        seed = common._resume(resume, "ppo", spec, config, state)
    steps_per_iteration = config.num_envs * config.steps_per_env
    done = int(to_numpy(state.step)[0]) // config.steps_per_env
    if done > config.iterations:
        raise ConfigError(f"the checkpoint is at {done * steps_per_iteration} steps, past "
                          f"total_steps={config.total_steps}")
    bar = common.Progress(config.iterations * steps_per_iteration, progress)
    update = fuse(device, minibatch_update, config, state)
    updates_per_iteration = config.epochs * config.minibatches
    if spec.native is not None:
        rollout_step = fuse(device, native_rollout_step, config, spec.native, state)
        compile_seconds = time.perf_counter() - start
        loop_start = time.perf_counter()
        while done < config.iterations:
            rollout_step(config.steps_per_env)
            _check_observations(state)
            update(updates_per_iteration)
            done += 1
            bar.update(done * steps_per_iteration, state)
        train_seconds = time.perf_counter() - loop_start
    else:
        compile_seconds, train_seconds = _train_python_stepped(device, spec, config, state, done, seed, bar,
                                                               update, updates_per_iteration, start)
    bar.close()
    ends, returns, lengths = state.log.finished()
    return common.TrainResult("ppo", spec.name, device, seed, config.iterations * steps_per_iteration, config,
                              policy(state, spec.action_low, spec.action_high),
                              {"steps": ends * config.num_envs, "returns": returns, "lengths": lengths},
                              train_seconds, compile_seconds, state, spec)


def _train_python_stepped(device, spec, config, state, done, seed, bar, update, updates_per_iteration, start):
    batch = spec.make_batch()
    io = state.io
    act_step = fuse(device, act, config, state, io.obs)
    store_step = fuse(device, python_store, config, state)
    compile_seconds = time.perf_counter() - start
    low, high = spec.action_low, spec.action_high
    loop_start = time.perf_counter()
    try:
        obs = _finite_rows("reset observations", batch.reset(seed))
        while done < config.iterations:
            for _ in range(config.steps_per_env):
                assign(io.obs, obs)
                act_step()
                action = np.clip(to_numpy(state.action), -1.0, 1.0)
                obs, reward, terminated, truncated, _ = batch.step(low + (action + 1) * 0.5 * (high - low))
                obs = _finite_rows("observations", obs)
                for arr, value in ((io.next_obs, _finite_rows("final observations", batch.final_obs)),
                                   (io.reward, _finite_rows("rewards", reward)),
                                   (io.terminated, terminated), (io.truncated, truncated)):
                    assign(arr, value)
                store_step()
            update(updates_per_iteration)
            done += 1
            bar.update(done * config.num_envs * config.steps_per_env, state)
    finally:
        batch.close()
    return compile_seconds, time.perf_counter() - loop_start

