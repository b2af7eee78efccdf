"""TD3 (Fujimoto et al. 2018) written once over generic functions; the device decides the rest.

Per environment step: act (uniform random during warm-up, then actor + Gaussian noise), store
the transition, and after warm-up train the twin critics on a replay batch every step and the
actor and the target networks every ``policy_delay`` steps. :func:`common.native_step` fuses all
of it, env included, into one compiled kernel per device for native envs.
"""

import sys
from dataclasses import dataclass

import numpy as np

from ..arrays import zeros
from ..data import episode_log, replay_buffer, transitions
from ..kernels.api import copy, fill, mse_gradient, random_uniform, rng
from ..kernels.rl.api import add_clipped_noise, concat_columns, replay_sample, slice_columns, td_target
from ..nn import Policy, adam_update, mlp, mlp_backward, mlp_buffers, mlp_forward, polyak_average
from ..staging import Below, Every, when
from . import common


@dataclass
class Config:
    """Defaults: the RLtools paper's Pendulum benchmark (and the TD3 paper)."""

    total_steps: int = 10_000
    warmup_steps: int = 100          # uniform random actions, no updates
    batch_size: int = 100
    hidden: tuple = (64, 64)
    activation: str = "relu"
    gamma: float = 0.99
    polyak: float = 0.995            # target ← polyak·target + (1 − polyak)·online
    actor_lr: float = 1e-3
    critic_lr: float = 1e-3
    policy_delay: int = 2            # actor and target updates every 2nd step
    exploration_noise: float = 0.1
    target_noise: float = 0.2
    target_noise_clip: float = 0.5
    replay_capacity: int = None      # None: total_steps
    num_envs: int = 1

    def validate(self):
        common.validate_off_policy(self, {
            "exploration_noise": (common.non_negative, "a number >= 0"),
            "target_noise": (common.non_negative, "a number >= 0"),
            "target_noise_clip": (common.non_negative, "a number >= 0"),
        })

    @property
    def capacity(self):
        return self.replay_capacity or self.total_steps


@dataclass
class State:
    actor: object
    critic1: object
    critic2: object
    actor_target: object
    critic1_target: object
    critic2_target: object
    actor_act: object           # actor buffers, N rows (acting)
    # B-row buffers, shared by the target and online nets of a kind: their uses never overlap,
    # and a smaller working set stays in cache
    actor_batch: object
    critic1_batch: object       # keeps the input gradient, for the actor update
    critic2_batch: object
    critic_input: object        # [obs, action] rows, refilled before each use
    q_target: object
    d_action: object            # ∂(−mean Q)/∂action
    replay: object
    batch: object
    io: object                  # the current transition, N rows
    action: object              # (N, A) in [-1, 1]
    log: object
    rng: object
    step: object                # int64 (1,): environment steps taken (per env)
    env_state: object = None

    validate_checkpoint = common.validate_off_policy_checkpoint


def build(device, config, obs_dim, action_dim, seed):
    n, b = config.num_envs, config.batch_size
    actor_sizes = (obs_dim, *config.hidden, action_dim)
    critic_sizes = (obs_dim + action_dim, *config.hidden, 1)

    def net(sizes, output, k, trainable=True):
        return mlp(device, sizes, config.activation, output, seed=seed * 8 + k, trainable=trainable)

    actor, critic1, critic2 = net(actor_sizes, "tanh", 0), net(critic_sizes, "identity", 1), net(critic_sizes, "identity", 2)
    targets = [net(actor_sizes, "tanh", 0, False), net(critic_sizes, "identity", 1, False),
               net(critic_sizes, "identity", 2, False)]
    return State(actor, critic1, critic2, *targets,
                 mlp_buffers(device, actor, n), mlp_buffers(device, actor, b),
                 mlp_buffers(device, critic1, b, input_gradient=True), mlp_buffers(device, critic2, b),
                 zeros(device, (b, obs_dim + action_dim)), zeros(device, (b, 1)), zeros(device, (b, action_dim)),
                 replay_buffer(device, config.capacity, obs_dim, action_dim),
                 transitions(device, b, obs_dim, action_dim), transitions(device, n, obs_dim, action_dim),
                 zeros(device, (n, action_dim)), episode_log(device, n, common.EPISODE_LOG_CAPACITY),
                 rng(device, seed), zeros(device, 1, np.int64))


def act(device, config, s, obs):
    def explore(device):
        mlp_forward(device, s.actor, s.actor_act, obs)
        copy(device, s.actor_act.output, s.action)
        add_clipped_noise(device, s.rng, s.action, config.exploration_noise, None, -1.0, 1.0)

    when(device, Below(s.step, config.warmup_steps),
         lambda device: random_uniform(device, s.rng, s.action, -1.0, 1.0), explore)


def update_critics(device, config, s):
    replay_sample(device, s.rng, s.replay, s.batch)
    # target: r + γ(1 − terminated) min_i Q'_i(s', clip(π'(s') + clip(ε, ±c), −1, 1))
    mlp_forward(device, s.actor_target, s.actor_batch, s.batch.next_obs)
    add_clipped_noise(device, s.rng, s.actor_batch.output, config.target_noise, config.target_noise_clip, -1.0, 1.0)
    concat_columns(device, s.batch.next_obs, s.actor_batch.output, s.critic_input)
    mlp_forward(device, s.critic1_target, s.critic1_batch, s.critic_input)
    mlp_forward(device, s.critic2_target, s.critic2_batch, s.critic_input)
    td_target(device, s.batch.reward, s.batch.terminated, s.critic1_batch.output, s.critic2_batch.output,
              config.gamma, s.q_target)
    concat_columns(device, s.batch.obs, s.batch.action, s.critic_input)
    for critic, buffers in ((s.critic1, s.critic1_batch), (s.critic2, s.critic2_batch)):
        mlp_forward(device, critic, buffers, s.critic_input)
        mse_gradient(device, buffers.output, s.q_target, buffers.d_output)
        mlp_backward(device, critic, buffers, s.critic_input, buffers.d_output, input_gradient=False)
        adam_update(device, critic, config.critic_lr)


def update_actor(device, config, s):
    # maximise Q1(s, π(s)): backpropagate −1/B through critic 1 into the action, then the actor
    mlp_forward(device, s.actor, s.actor_batch, s.batch.obs)
    concat_columns(device, s.batch.obs, s.actor_batch.output, s.critic_input)
    mlp_forward(device, s.critic1, s.critic1_batch, s.critic_input)
    fill(device, s.critic1_batch.d_output, -1.0 / config.batch_size)
    mlp_backward(device, s.critic1, s.critic1_batch, s.critic_input, s.critic1_batch.d_output, parameters=False)
    slice_columns(device, s.critic1_batch.d_in[0], s.batch.obs.shape[1], s.d_action)
    mlp_backward(device, s.actor, s.actor_batch, s.batch.obs, s.d_action)
    adam_update(device, s.actor, config.actor_lr)


def update_targets(device, config, s):
    for online, target in ((s.actor, s.actor_target), (s.critic1, s.critic1_target), (s.critic2, s.critic2_target)):
        polyak_average(device, target, online, config.polyak)


def learn(device, config, s):
    def train(device):
        update_critics(device, config, s)
        delayed = Every(s.step, config.policy_delay, (config.warmup_steps + config.policy_delay - 1) % config.policy_delay)
        when(device, delayed, lambda device: (update_actor(device, config, s), update_targets(device, config, s)))

    when(device, Below(s.step, config.warmup_steps), None, train)


def policy(s, action_low, action_high):
    return Policy.from_mlp(s.actor, action_low, action_high, squash="tanh")


def train(device, env="pendulum", config=None, seed=0, progress=None, resume=None):
    """Train TD3; returns a :class:`common.TrainResult` (``.policy`` acts on numpy observations,
    ``.history``, ``.train_seconds``, ``.compile_seconds``, ``.save(path)``)."""
    return common.train_off_policy(sys.modules[__name__], "td3", device, env, config, seed, progress, resume)
