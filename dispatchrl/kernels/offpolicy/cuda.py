"""CUDA methods of the off-policy generic functions (one thread per row or element): grid kernels
and block forms generated from one element body each, the CPU's where the CPU has one."""

import math

import numpy as np

from ...backends.cuda import (
    DYNAMIC_SHARED,
    Launch,
    device_twin,
    flat,
    lanes_block,
    lanes_total,
    launch_1d,
    launch_2d,
    launch_once,
    once,
    per_index,
)
from ...devices import CUDA
from ...staging import launch
from ..core.cuda import increment_kernel, row_argmax
from ..random.cuda import standard_normal, uniform01
from ..replay.cuda import copy_transition
from . import api, cpu
from .api import TRANSITION_RECORDS, episode_log_arrays, transition_arrays

__all__ = ["gaussian_tanh_grad"]

gaussian_tanh_grad = device_twin(cpu.gaussian_tanh_grad)


replay_add_kernel = per_index(
    cpu.replay_add_row, "obs.shape[0]", fields=TRANSITION_RECORDS, copy_transition=copy_transition
)
# after every row was written at the old position
advance_ring_kernel = once(cpu.advance_ring)


@api.replay_add.dispatch
def replay_add(device: CUDA, buffer, *transition):
    # transition: the step's arrays in TRANSITION_FIELDS order (obs first: a row per env)
    rows = transition[0].shape[0]
    launch_1d(device, replay_add_kernel, rows, *transition, *transition_arrays(buffer), buffer.position)
    launch_once(device, advance_ring_kernel, buffer.position, buffer.size, rows, buffer.obs.shape[0])


def _replay_sample_at(k, rng, ring, size, transition) -> None:
    row = np.int64(uniform01(rng[0], rng[1] + np.uint64(k)) * size[0])
    copy_transition(k, row, ring, transition)


replay_sample_kernel = per_index(_replay_sample_at, "obs.shape[0]", fields=TRANSITION_RECORDS)


@api.replay_sample.dispatch
def replay_sample(device: CUDA, rng, buffer, batch):
    rows = batch.obs.shape[0]
    launch_1d(
        device, replay_sample_kernel, rows, rng, *transition_arrays(buffer), buffer.size, *transition_arrays(batch)
    )
    launch(device, Launch(increment_kernel, (1,), (1,)), rng, 1, np.uint64(rows))


def _concat_columns_at(i, j, a, b, out) -> None:
    out[i, j] = a[i, j] if j < a.shape[1] else b[i, j - a.shape[1]]


concat_columns_kernel = per_index(_concat_columns_at, "out.shape[0]", "out.shape[1]")


@api.concat_columns.dispatch
def concat_columns(device: CUDA, a, b, out):
    launch_2d(device, concat_columns_kernel, out.shape, a, b, out)


def _slice_columns_at(i, j, x, start, out) -> None:
    out[i, j] = x[i, start + j]


slice_columns_kernel = per_index(_slice_columns_at, "out.shape[0]", "out.shape[1]")


@api.slice_columns.dispatch
def slice_columns(device: CUDA, x, start, out):
    launch_2d(device, slice_columns_kernel, out.shape, x, start, out)


add_clipped_noise_kernel = per_index(cpu.add_clipped_noise_at, "x.size", standard_normal=standard_normal)


@api.add_clipped_noise.dispatch
def add_clipped_noise(device: CUDA, rng, x, std, noise_clip, low, high):
    launch_1d(device, add_clipped_noise_kernel, x.size, rng, flat(x), std, noise_clip, low, high)
    launch(device, Launch(increment_kernel, (1,), (1,)), rng, 1, np.uint64(2 * x.size))


def _td_target_at(i, reward, terminated, q1, q2, gamma, target) -> None:
    bootstrap = 0.0 if terminated[i] else gamma * min(q1[i, 0], q2[i, 0])
    target[i, 0] = reward[i] + bootstrap


td_target_kernel = per_index(_td_target_at, "reward.shape[0]")


@api.td_target.dispatch
def td_target(device: CUDA, reward, terminated, q1, q2, gamma, target):
    launch_1d(device, td_target_kernel, reward.shape[0], reward, terminated, q1, q2, gamma, target)


def _track_episodes_at(
    i, reward, terminated, truncated, step, running_return, running_length, returns, lengths, end_steps, count
) -> None:
    running_return[i] += reward[i]
    running_length[i] += 1
    if terminated[i] or truncated[i]:
        # the CPU's slot, not an atomic's arrival order: the episodes of lower env indices that
        # end at this step come first (a ring smaller than a step's episodes keeps the same ones);
        # count advances in _count_episodes, after every thread has read it
        rank = 0
        for j in range(i):
            if terminated[j] or truncated[j]:
                rank += 1
        at = (count[0] + rank) % returns.shape[0]  # a ring: the driver reads it at every chunk boundary
        returns[at] = running_return[i]
        lengths[at] = running_length[i]
        end_steps[at] = step[0]
        running_return[i] = 0.0
        running_length[i] = 0


def _count_episodes(terminated, truncated, count) -> None:
    for j in range(terminated.shape[0]):
        if terminated[j] or truncated[j]:
            count[0] += 1


track_episodes_kernel = per_index(_track_episodes_at, "reward.shape[0]")
count_episodes_kernel = once(_count_episodes)


@api.track_episodes.dispatch
def track_episodes(device: CUDA, log, reward, terminated, truncated, step):
    launch_1d(
        device,
        track_episodes_kernel,
        reward.shape[0],
        reward,
        terminated,
        truncated,
        step,
        *episode_log_arrays(log),
    )
    launch_once(device, count_episodes_kernel, terminated, truncated, log.count)


gaussian_tanh_sample_kernel = per_index(cpu.gaussian_tanh_sample_at, "action.shape[0]", standard_normal=standard_normal)


@api.gaussian_tanh_sample.dispatch
def gaussian_tanh_sample(device: CUDA, rng, actor_out, noise, action, log_prob):
    launch_1d(device, gaussian_tanh_sample_kernel, action.shape[0], rng, actor_out, noise, action, log_prob)
    launch(device, Launch(increment_kernel, (1,), (1,)), rng, 1, np.uint64(2 * action.size))


def _gaussian_tanh_backward_at(i, j, actor_out, noise, action, d_action, log_alpha, d_actor_out) -> None:
    batch, a_dim = action.shape
    d_mean, d_log_std = gaussian_tanh_grad(
        np.float64(action[i, j]),
        d_action[i, j],
        actor_out[i, a_dim + j],
        noise[i, j],
        math.exp(log_alpha[0]) / batch,
    )
    d_actor_out[i, j] = d_mean
    d_actor_out[i, a_dim + j] = d_log_std


gaussian_tanh_backward_kernel = per_index(_gaussian_tanh_backward_at, "action.shape[0]", "action.shape[1]")


@api.gaussian_tanh_backward.dispatch
def gaussian_tanh_backward(device: CUDA, actor_out, noise, action, d_action, log_alpha, d_actor_out):
    launch_2d(
        device, gaussian_tanh_backward_kernel, action.shape, actor_out, noise, action, d_action, log_alpha, d_actor_out
    )


def _soft_td_target_at(i, reward, terminated, q1, q2, log_prob, log_alpha, gamma, target) -> None:
    soft_q = min(q1[i, 0], q2[i, 0]) - math.exp(log_alpha[0]) * log_prob[i, 0]
    target[i, 0] = reward[i] + (0.0 if terminated[i] else gamma * soft_q)


soft_td_target_kernel = per_index(_soft_td_target_at, "reward.shape[0]")


@api.soft_td_target.dispatch
def soft_td_target(device: CUDA, reward, terminated, q1, q2, log_prob, log_alpha, gamma, target):
    launch_1d(
        device, soft_td_target_kernel, reward.shape[0], reward, terminated, q1, q2, log_prob, log_alpha, gamma, target
    )


# batch-sized reduction: one thread is enough, the same order of sums as the CPU
entropy_temperature_gradient_kernel = once(cpu.entropy_temperature_gradient_kernel)


@api.entropy_temperature_gradient.dispatch
def entropy_temperature_gradient(device: CUDA, log_prob, target_entropy, grad):
    launch_once(device, entropy_temperature_gradient_kernel, log_prob, target_entropy, grad)


def _select_min_rows_at(i, j, a, b, x, y, out) -> None:
    out[i, j] = x[i, j] if a[i, 0] <= b[i, 0] else y[i, j]


select_min_rows_kernel = per_index(_select_min_rows_at, "out.shape[0]", "out.shape[1]")


@api.select_min_rows.dispatch
def select_min_rows(device: CUDA, a, b, x, y, out):
    launch_2d(device, select_min_rows_kernel, out.shape, a, b, x, y, out)


# learner statistics: batch sums in float64 by STATS_LANES threads (one thread each left the rest
# of a fused step's block waiting ~100 dependent float64 adds)
STATS_LANES = 128


def _stats_method(body, name: str) -> tuple:
    kernel = lanes_block(body, name, STATS_LANES, lanes_total=lanes_total)
    DYNAMIC_SHARED[kernel] = lambda *args: 8 * STATS_LANES

    def run(device: CUDA, *args) -> None:
        launch(device, Launch(kernel, (1,), (STATS_LANES,), 8 * STATS_LANES), *args)

    return kernel, run


accumulate_critic_stats_kernel, _critic_stats = _stats_method(
    cpu.accumulate_critic_stats_lanes, "accumulate_critic_stats"
)
accumulate_actor_stats_kernel, _actor_stats = _stats_method(cpu.accumulate_actor_stats_lanes, "accumulate_actor_stats")
accumulate_sac_actor_stats_kernel, _sac_actor_stats = _stats_method(
    cpu.accumulate_sac_actor_stats_lanes, "accumulate_sac_actor_stats"
)


@api.accumulate_critic_stats.dispatch
def accumulate_critic_stats(device: CUDA, q1, q2, target, stats):
    _critic_stats(device, q1, q2, target, stats)


@api.accumulate_actor_stats.dispatch
def accumulate_actor_stats(device: CUDA, q, stats):
    _actor_stats(device, q, stats)


@api.accumulate_sac_actor_stats.dispatch
def accumulate_sac_actor_stats(device: CUDA, q1, q2, log_prob, log_alpha, stats):
    _sac_actor_stats(device, q1, q2, log_prob, log_alpha, stats)


# ---------------------------------------------------------------- DQN: the CPU's row bodies

taken_column = device_twin(cpu.taken_column)

epsilon_greedy_kernel = per_index(cpu.epsilon_greedy_at, "q.shape[0]", uniform01=uniform01, row_argmax=row_argmax)


@api.epsilon_greedy.dispatch
def epsilon_greedy(device: CUDA, rng, q, step, initial_eps, final_eps, decay_steps, action):
    rows = q.shape[0]
    launch_1d(device, epsilon_greedy_kernel, rows, rng, q, step, initial_eps, final_eps, decay_steps, action)
    launch(device, Launch(increment_kernel, (1,), (1,)), rng, 1, np.uint64(2 * rows))


dqn_targets_kernel = per_index(cpu.dqn_target_at, "reward.shape[0]", row_argmax=row_argmax)


@api.dqn_targets.dispatch
def dqn_targets(device: CUDA, q_next_online, *args):
    launch_1d(device, dqn_targets_kernel, q_next_online.shape[0], q_next_online, *args)


q_huber_gradient_kernel = per_index(cpu.q_huber_gradient_at, "q.shape[0]", taken_column=taken_column)


@api.q_huber_gradient.dispatch
def q_huber_gradient(device: CUDA, q, action, target, d_q):
    launch_1d(device, q_huber_gradient_kernel, q.shape[0], q, action, target, d_q)


# batch-sized float64 sums, one thread (the CPU kernel's order of sums)
accumulate_q_stats_kernel = once(cpu.accumulate_q_stats_kernel, taken_column=taken_column)


@api.accumulate_q_stats.dispatch
def accumulate_q_stats(device: CUDA, q, action, target, stats):
    launch_once(device, accumulate_q_stats_kernel, q, action, target, stats)


taken_q_kernel = per_index(cpu.taken_q_at, "q.shape[0]", taken_column=taken_column)


@api.taken_q.dispatch
def taken_q(device: CUDA, q, action, out):
    launch_1d(device, taken_q_kernel, q.shape[0], q, action, out)


dueling_q_kernel = per_index(cpu.dueling_q_at, "raw.shape[0]")


@api.dueling_q.dispatch
def dueling_q(device: CUDA, raw, q):
    launch_1d(device, dueling_q_kernel, raw.shape[0], raw, q)


dueling_q_backward_kernel = per_index(cpu.dueling_q_backward_at, "d_q.shape[0]")


@api.dueling_q_backward.dispatch
def dueling_q_backward(device: CUDA, d_q, d_raw):
    launch_1d(device, dueling_q_backward_kernel, d_q.shape[0], d_q, d_raw)
