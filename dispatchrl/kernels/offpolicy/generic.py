"""Generic (numpy) methods of the off-policy generic functions: the reference and the fallback."""

import math

import numpy as np

from ..random.generic import standard_normal, uniform01
from . import api

__all__: list[str] = []


def replay_add_kernel(*arrays) -> None:
    # the step's six arrays, then the ring's (both in TRANSITION_FIELDS order), its position and size
    step, ring, (position, size) = arrays[:6], arrays[6:12], arrays[12:]
    capacity, count = ring[0].shape[0], step[0].shape[0]
    rows = (position[0] + np.arange(count)) % capacity
    for src, dst in zip(step, ring):
        dst[rows] = src
    position[0] = (position[0] + count) % capacity
    size[0] = min(size[0] + count, capacity)


def concat_columns_kernel(a, b, out) -> None:
    out[:, : a.shape[1]] = a
    out[:, a.shape[1] :] = b


def slice_columns_kernel(x, start, out) -> None:
    out[...] = x[:, start : start + out.shape[1]]


def add_clipped_noise_kernel(rng, x, std, noise_clip, low, high) -> None:
    noise = np.clip(std * standard_normal(rng, x.size).reshape(x.shape), -noise_clip, noise_clip)
    x[...] = np.clip(x + noise, low, high)


def td_target_kernel(reward, terminated, q1, q2, gamma, target) -> None:
    target[:, 0] = reward + gamma * (1.0 - terminated) * np.minimum(q1[:, 0], q2[:, 0])


def track_episodes_kernel(
    reward, terminated, truncated, step, running_return, running_length, returns, lengths, end_steps, count
) -> None:
    running_return += reward
    running_length += 1
    for i in np.flatnonzero(terminated | truncated):
        at = count[0] % returns.shape[0]  # a ring: the driver reads it at every chunk boundary
        returns[at], lengths[at], end_steps[at] = running_return[i], running_length[i], step[0]
        count[0] += 1
        running_return[i], running_length[i] = 0.0, 0


def _mean_log_std(actor_out):
    a = actor_out.shape[1] // 2
    return actor_out[:, :a], np.clip(actor_out[:, a:], api.LOG_STD_MIN, api.LOG_STD_MAX)


def gaussian_tanh_sample_kernel(rng, actor_out, noise, action, log_prob) -> None:
    mean, log_std = _mean_log_std(actor_out.astype(np.float64))
    eps = standard_normal(rng, noise.size).reshape(noise.shape)
    noise[...] = eps
    a = np.tanh(mean + np.exp(log_std) * eps)
    action[...] = a
    log_prob[:, 0] = np.sum(
        -0.5 * eps * eps - log_std - 0.5 * math.log(2 * math.pi) - np.log(1.0 - a * a + 1e-6), axis=1
    )


def gaussian_tanh_backward_kernel(actor_out, noise, action, d_action, log_alpha, d_actor_out) -> None:
    batch, a_dim = action.shape
    raw_log_std = actor_out[:, a_dim:].astype(np.float64)
    std = np.exp(np.clip(raw_log_std, api.LOG_STD_MIN, api.LOG_STD_MAX))
    a = action.astype(np.float64)
    scale = math.exp(float(log_alpha[0])) / batch  # α / B: the entropy term of the mean loss
    one_minus = 1.0 - a * a
    d_u = d_action * one_minus + scale * 2.0 * a * one_minus / (one_minus + 1e-6)
    d_actor_out[:, :a_dim] = d_u
    inside = (raw_log_std > api.LOG_STD_MIN) & (raw_log_std < api.LOG_STD_MAX)
    d_actor_out[:, a_dim:] = np.where(inside, d_u * std * noise - scale, 0.0)


def soft_td_target_kernel(reward, terminated, q1, q2, log_prob, log_alpha, gamma, target) -> None:
    soft_q = np.minimum(q1[:, 0], q2[:, 0]) - math.exp(float(log_alpha[0])) * log_prob[:, 0]
    target[:, 0] = reward + gamma * (1.0 - terminated) * soft_q


def entropy_temperature_gradient_kernel(log_prob, target_entropy, grad) -> None:
    grad[0] = -np.mean(log_prob[:, 0].astype(np.float64) + target_entropy)


def select_min_rows_kernel(a, b, x, y, out) -> None:
    out[...] = np.where(a <= b, x, y)


def accumulate_critic_stats_kernel(q1, q2, target, stats):
    q1, q2, target = (a[:, 0].astype(np.float64) for a in (q1, q2, target))
    stats[0] += 1.0
    stats[1] += np.mean((q1 - target) ** 2) + np.mean((q2 - target) ** 2)
    stats[2] += np.mean(q1 + q2) / 2.0


def accumulate_actor_stats_kernel(q, stats):
    stats[0] += 1.0
    stats[1] -= np.mean(q[:, 0].astype(np.float64))


def accumulate_sac_actor_stats_kernel(q1, q2, log_prob, log_alpha, stats):
    q = np.minimum(q1[:, 0], q2[:, 0]).astype(np.float64)
    log_prob = log_prob[:, 0].astype(np.float64)
    stats[0] += 1.0
    stats[1] += np.mean(math.exp(float(log_alpha[0])) * log_prob - q)
    stats[2] -= np.mean(log_prob)


# ---------------------------------------------------------------- DQN


def _taken(action, k):
    """The taken actions' column indices (a stored index is in range; the clip keeps a corrupt one
    inside the row, as the compiled kernels do)."""
    return np.clip(action[:, 0].astype(np.int64), 0, k - 1)


def epsilon_greedy_kernel(rng, q, step, initial_eps, final_eps, decay_steps, action) -> None:
    n, k = q.shape
    eps = initial_eps + (final_eps - initial_eps) * min(1.0, np.float64(step[0]) / decay_steps)
    u = uniform01(rng, 2 * n)
    explore = u[0::2] < eps
    uniform = np.minimum((u[1::2] * k).astype(np.int64), k - 1)
    action[:, 0] = np.where(explore, uniform, np.argmax(q, axis=1))


def dqn_targets_kernel(q_next_online, q_next_target, reward, terminated, gamma, target, double) -> None:
    rows = np.arange(q_next_target.shape[0])
    chosen = np.argmax(q_next_online if double else q_next_target, axis=1)
    q = q_next_target[rows, chosen].astype(np.float64)
    target[:, 0] = reward + np.where(terminated, 0.0, gamma * q)


def q_huber_gradient_kernel(q, action, target, d_q) -> None:
    rows = np.arange(q.shape[0])
    taken = _taken(action, q.shape[1])
    error = q[rows, taken].astype(np.float64) - target[:, 0]
    d_q[...] = 0.0
    d_q[rows, taken] = np.clip(error, -1.0, 1.0) / q.shape[0]


def accumulate_q_stats_kernel(q, action, target, stats):
    rows = np.arange(q.shape[0])
    taken = q[rows, _taken(action, q.shape[1])].astype(np.float64)
    error = np.abs(taken - target[:, 0])
    stats[0] += 1.0
    stats[1] += np.mean(np.where(error <= 1.0, 0.5 * error * error, error - 0.5))
    stats[2] += np.mean(taken)


def taken_q_kernel(q, action, out) -> None:
    out[:, 0] = q[np.arange(q.shape[0]), _taken(action, q.shape[1])]


def _row_sums(x, first) -> np.ndarray:
    """float64 sums of the columns ``first:`` of each row, added in column order (the compiled
    kernels' order, so the results are the same bits)."""
    total = x[:, first].astype(np.float64)
    for j in range(first + 1, x.shape[1]):
        total = total + x[:, j]
    return total


def dueling_q_kernel(raw, q) -> None:
    mean = _row_sums(raw, 1) / q.shape[1]
    value = raw[:, 0].astype(np.float64)
    for j in range(q.shape[1]):
        q[:, j] = value + raw[:, 1 + j] - mean


def dueling_q_backward_kernel(d_q, d_raw) -> None:
    total = _row_sums(d_q, 0)
    d_raw[:, 0] = total
    mean = total / d_q.shape[1]
    for j in range(d_q.shape[1]):
        d_raw[:, 1 + j] = d_q[:, j] - mean
