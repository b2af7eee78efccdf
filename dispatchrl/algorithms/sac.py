"""SAC (Haarnoja et al. 2018) with twin critics, a tanh-squashed Gaussian actor and automatic
entropy tuning (target entropy −|A|), written once over generic functions.

Per gradient step, in Stable-Baselines3's order: sample a replay batch and fresh actions
a ~ π(·|s); update the temperature α; build the soft TD target from the target critics on
a' ~ π(·|s'); update both critics; update the actor through min(Q1, Q2)(s, a); move the target
critics by Polyak averaging. :func:`common.native_step` fuses all of it, env included.
"""

import sys
from dataclasses import dataclass

import numpy as np

from ..arrays import zeros
from ..data import episode_log, replay_buffer, transitions
from ..kernels.api import adam_step, fill, mse_gradient, random_uniform, rng
from ..kernels.rl.api import (concat_columns, entropy_temperature_gradient, gaussian_tanh_backward,
                              gaussian_tanh_sample, replay_sample, select_min_rows, slice_columns,
                              soft_td_target)
from ..nn import Policy, adam_update, mlp, mlp_backward, mlp_buffers, mlp_forward, parameter, polyak_average
from ..staging import Below, Every, when
from . import common


@dataclass
class Config:
    total_steps: int = 10_000
    warmup_steps: int = 100
    batch_size: int = 100
    hidden: tuple = (64, 64)
    activation: str = "relu"
    gamma: float = 0.99
    polyak: float = 0.995
    actor_lr: float = 1e-3
    critic_lr: float = 1e-3
    alpha_lr: float = 1e-3
    initial_alpha: float = 0.2        # the SAC paper's temperature; tuned automatically from there
    target_entropy: float = None     # None: −action_dim
    policy_delay: int = 1            # actor and temperature updates every step
    replay_capacity: int = None      # None: total_steps
    num_envs: int = 1

    def validate(self):
        common.validate_off_policy(self, {
            "alpha_lr": (common.positive, "a positive number"),
            "initial_alpha": (common.positive, "a positive number"),
            "target_entropy": (lambda v: v is None or np.isfinite(v), "None or a finite number"),
        })

    @property
    def capacity(self):
        return self.replay_capacity or self.total_steps


@dataclass
class State:
    actor: object               # outputs [mean, log_std]
    critic1: object
    critic2: object
    critic1_target: object
    critic2_target: object
    log_alpha: object           # Parameter (1,): the temperature, trained by Adam
    actor_act: object           # actor buffers, N rows
    actor_train: object         # actor buffers, B rows (its d_output takes the Gaussian head's gradient)
    actor_next: object
    critic1_train: object
    critic2_train: object
    critic1_next: object
    critic2_next: object
    critic1_actor: object       # critics on the policy's actions, with input gradients
    critic2_actor: object
    act_noise: object           # ε, action and log π for acting (N rows) ...
    act_log_prob: object
    pi_noise: object            # ... for the actor update on the batch (B rows) ...
    pi_action: object
    pi_log_prob: object
    next_noise: object          # ... and for the target on next observations
    next_action: object
    next_log_prob: object
    critic_in: object
    critic_next_in: object
    actor_critic_in: object
    d_critic_in: object         # gradient of −mean min(Q1, Q2) w.r.t. [obs, action]
    d_action: object
    q_target: object
    replay: object
    batch: object
    io: object
    action: object
    log: object
    rng: object
    step: object
    env_state: object = None

    validate_checkpoint = common.validate_off_policy_checkpoint


def build(device, config, obs_dim, action_dim, seed):
    n, b, a = config.num_envs, config.batch_size, action_dim
    actor_sizes = (obs_dim, *config.hidden, 2 * a)
    critic_sizes = (obs_dim + a, *config.hidden, 1)

    def net(sizes, k):
        return mlp(device, sizes, config.activation, "identity", seed=seed * 8 + k)

    actor, critic1, critic2 = net(actor_sizes, 0), net(critic_sizes, 1), net(critic_sizes, 2)
    log_alpha = parameter(device, (1,))
    fill(device, log_alpha.value, float(np.log(config.initial_alpha)))
    critic_width = obs_dim + a
    return State(actor, critic1, critic2, net(critic_sizes, 1), net(critic_sizes, 2), log_alpha,
                 mlp_buffers(device, actor, n), mlp_buffers(device, actor, b), mlp_buffers(device, actor, b),
                 mlp_buffers(device, critic1, b), mlp_buffers(device, critic2, b),
                 mlp_buffers(device, critic1, b), mlp_buffers(device, critic2, b),
                 mlp_buffers(device, critic1, b, input_gradient=True),
                 mlp_buffers(device, critic2, b, input_gradient=True),
                 zeros(device, (n, a)), zeros(device, (n, 1)),
                 zeros(device, (b, a)), zeros(device, (b, a)), zeros(device, (b, 1)),
                 zeros(device, (b, a)), zeros(device, (b, a)), zeros(device, (b, 1)),
                 zeros(device, (b, critic_width)), zeros(device, (b, critic_width)),
                 zeros(device, (b, critic_width)), zeros(device, (b, critic_width)),
                 zeros(device, (b, a)), zeros(device, (b, 1)),
                 replay_buffer(device, config.capacity, obs_dim, a), transitions(device, b, obs_dim, a),
                 transitions(device, n, obs_dim, a), zeros(device, (n, a)),
                 episode_log(device, n, common.EPISODE_LOG_CAPACITY), rng(device, seed), zeros(device, 1, np.int64))


def act(device, config, s, obs):
    def explore(device):
        mlp_forward(device, s.actor, s.actor_act, obs)
        gaussian_tanh_sample(device, s.rng, s.actor_act.output, s.act_noise, s.action, s.act_log_prob)

    when(device, Below(s.step, config.warmup_steps),
         lambda device: random_uniform(device, s.rng, s.action, -1.0, 1.0), explore)


def update_temperature(device, config, s):
    target_entropy = -s.pi_action.shape[1] if config.target_entropy is None else config.target_entropy
    entropy_temperature_gradient(device, s.pi_log_prob, target_entropy, s.log_alpha.grad)
    p = s.log_alpha
    adam_step(device, p.value, p.grad, p.m, p.v, p.t, config.alpha_lr)


def update_critics(device, config, s):
    # soft target: r + γ(1 − terminated)(min_i Q'_i(s', a') − α log π(a'|s')), a' ~ π(·|s')
    mlp_forward(device, s.actor, s.actor_next, s.batch.next_obs)
    gaussian_tanh_sample(device, s.rng, s.actor_next.output, s.next_noise, s.next_action, s.next_log_prob)
    concat_columns(device, s.batch.next_obs, s.next_action, s.critic_next_in)
    mlp_forward(device, s.critic1_target, s.critic1_next, s.critic_next_in)
    mlp_forward(device, s.critic2_target, s.critic2_next, s.critic_next_in)
    soft_td_target(device, s.batch.reward, s.batch.terminated, s.critic1_next.output, s.critic2_next.output,
                   s.next_log_prob, s.log_alpha.value, config.gamma, s.q_target)
    concat_columns(device, s.batch.obs, s.batch.action, s.critic_in)
    for critic, buffers in ((s.critic1, s.critic1_train), (s.critic2, s.critic2_train)):
        mlp_forward(device, critic, buffers, s.critic_in)
        mse_gradient(device, buffers.output, s.q_target, buffers.d_output)
        mlp_backward(device, critic, buffers, s.critic_in, buffers.d_output)
        adam_update(device, critic, config.critic_lr)


def update_actor(device, config, s):
    # minimise mean(α log π(a|s) − min(Q1, Q2)(s, a)) through the reparameterised sample a
    concat_columns(device, s.batch.obs, s.pi_action, s.actor_critic_in)
    for critic, buffers in ((s.critic1, s.critic1_actor), (s.critic2, s.critic2_actor)):
        mlp_forward(device, critic, buffers, s.actor_critic_in)
        fill(device, buffers.d_output, -1.0 / config.batch_size)
        mlp_backward(device, critic, buffers, s.actor_critic_in, buffers.d_output, parameters=False)
    select_min_rows(device, s.critic1_actor.output, s.critic2_actor.output, s.critic1_actor.d_in[0],
                    s.critic2_actor.d_in[0], s.d_critic_in)
    slice_columns(device, s.d_critic_in, s.batch.obs.shape[1], s.d_action)
    gaussian_tanh_backward(device, s.actor_train.output, s.pi_noise, s.pi_action, s.d_action,
                           s.log_alpha.value, s.actor_train.d_output)
    mlp_backward(device, s.actor, s.actor_train, s.batch.obs, s.actor_train.d_output)
    adam_update(device, s.actor, config.actor_lr)


def update_targets(device, config, s):
    for online, target in ((s.critic1, s.critic1_target), (s.critic2, s.critic2_target)):
        polyak_average(device, target, online, config.polyak)


def learn(device, config, s):
    def train(device):
        replay_sample(device, s.rng, s.replay, s.batch)
        mlp_forward(device, s.actor, s.actor_train, s.batch.obs)
        gaussian_tanh_sample(device, s.rng, s.actor_train.output, s.pi_noise, s.pi_action, s.pi_log_prob)
        delayed = Every(s.step, config.policy_delay, (config.warmup_steps + config.policy_delay - 1) % config.policy_delay)
        when(device, delayed, lambda device: update_temperature(device, config, s))
        update_critics(device, config, s)
        when(device, delayed, lambda device: update_actor(device, config, s))
        update_targets(device, config, s)

    when(device, Below(s.step, config.warmup_steps), None, train)


def policy(s, action_low, action_high):
    """The deterministic policy tanh(mean): the actor's last layer cut to its mean columns."""
    p = Policy.from_mlp(s.actor, action_low, action_high, squash="tanh")
    a = p.weights[-1].shape[1] // 2
    p.weights[-1], p.biases[-1] = p.weights[-1][:, :a].copy(), p.biases[-1][:a].copy()
    p.output_activation = "tanh"
    return p


def train(device, env="pendulum", config=None, seed=0, progress=None, resume=None):
    """Train SAC; returns a :class:`common.TrainResult`, as :func:`dispatchrl.td3.train`."""
    return common.train_off_policy(sys.modules[__name__], "sac", device, env, config, seed, progress, resume)
