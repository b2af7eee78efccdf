"""CPU (Numba) methods of the off-policy generic functions."""

import math

import numpy as np
from numba import njit

from ...backends.cpu import (
    JIT_EXACT,
    JIT_EXACT_INLINED,
    JIT_EXACT_INNER,
    JIT_FAST,
    JIT_FAST_INNER,
    lanes_total,
    one_lane,
    per_index,
)
from ..core.cpu import row_argmax
from ..random.cpu import standard_normal, uniform01
from ..replay.cpu import copy_transition
from . import api
from .api import TRANSITION_RECORDS

__all__ = [
    "add_clipped_noise_at",
    "dqn_target_at",
    "dueling_q_at",
    "dueling_q_backward_at",
    "epsilon_greedy_at",
    "gaussian_tanh_grad",
    "gaussian_tanh_sample_at",
    "q_huber_gradient_at",
    "row_argmax",
    "taken_q_at",
]


@njit(**JIT_EXACT_INLINED)
def replay_add_row(i, transition, ring, position):
    """Transition ``i`` written into the ring ``i`` rows after its position (the CUDA kernel's
    element body too: rows are independent, the position advances after all of them)."""
    copy_transition((position[0] + i) % ring[0].shape[0], i, transition, ring)


@njit(**JIT_EXACT_INNER)
def advance_ring(position, size, rows, capacity):
    position[0] = (position[0] + rows) % capacity
    size[0] = min(size[0] + rows, capacity)


replay_add_kernel = per_index(
    replay_add_row,
    "obs.shape[0]",
    "replay_add_kernel",
    more=("size",),
    after=["advance_ring(position, size, obs.shape[0], b_obs.shape[0])"],
    uses=(advance_ring,),
    fields=TRANSITION_RECORDS,
)


@njit(**JIT_FAST)
def concat_columns_kernel(a, b, out):
    na = a.shape[1]
    for i in range(a.shape[0]):
        for j in range(na):
            out[i, j] = a[i, j]
        for j in range(b.shape[1]):
            out[i, na + j] = b[i, j]


@njit(**JIT_FAST)
def slice_columns_kernel(x, start, out):
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            out[i, j] = x[i, start + j]


@njit(**JIT_EXACT_INNER)
def add_clipped_noise_at(i, rng, x, std, noise_clip, low, high):
    """Element ``i`` of add_clipped_noise (``x`` flat)."""
    noise = min(max(std * standard_normal(rng[0], rng[1] + np.uint64(2 * i)), -noise_clip), noise_clip)
    x[i] = min(max(x[i] + noise, low), high)


@njit(**JIT_EXACT)
def add_clipped_noise_kernel(rng, x, std, noise_clip, low, high):
    flat = x.reshape(x.size)
    for i in range(flat.size):
        add_clipped_noise_at(i, rng, flat, std, noise_clip, low, high)
    rng[1] = rng[1] + np.uint64(2 * flat.size)


@njit(**JIT_FAST)
def td_target_kernel(reward, terminated, q1, q2, gamma, target):
    for i in range(reward.shape[0]):
        bootstrap = 0.0 if terminated[i] else gamma * min(q1[i, 0], q2[i, 0])
        target[i, 0] = reward[i] + bootstrap


@njit(**JIT_EXACT)
def track_episodes_kernel(
    reward, terminated, truncated, step, running_return, running_length, returns, lengths, end_steps, count
):
    for i in range(reward.shape[0]):
        running_return[i] += reward[i]
        running_length[i] += 1
        if terminated[i] or truncated[i]:
            slot = count[0]
            at = slot % returns.shape[0]  # a ring: the driver reads it at every chunk boundary
            returns[at] = running_return[i]
            lengths[at] = running_length[i]
            end_steps[at] = step[0]
            count[0] = slot + 1
            running_return[i] = 0.0
            running_length[i] = 0


@njit(**JIT_EXACT_INNER)
def gaussian_tanh_sample_at(i, rng, actor_out, noise, action, log_prob):
    """Row ``i`` of gaussian_tanh_sample: a squashed Gaussian action and its log-probability."""
    a_dim = action.shape[1]
    total = 0.0
    for j in range(a_dim):
        eps = standard_normal(rng[0], rng[1] + np.uint64(2 * (i * a_dim + j)))
        log_std = min(max(np.float64(actor_out[i, a_dim + j]), api.LOG_STD_MIN), api.LOG_STD_MAX)
        a = math.tanh(actor_out[i, j] + math.exp(log_std) * eps)
        noise[i, j] = eps
        action[i, j] = a
        total += -0.5 * eps * eps - log_std - 0.5 * math.log(2 * math.pi) - math.log(1.0 - a * a + 1e-6)
    log_prob[i, 0] = total


@njit(**JIT_EXACT)
def gaussian_tanh_sample_kernel(rng, actor_out, noise, action, log_prob):
    for i in range(action.shape[0]):
        gaussian_tanh_sample_at(i, rng, actor_out, noise, action, log_prob)
    rng[1] = rng[1] + np.uint64(2 * action.size)


@njit(**JIT_FAST_INNER)
def gaussian_tanh_grad(a, d_a, raw_log_std, eps, scale):
    """(∂L/∂mean, ∂L/∂log_std) of one action component; ``scale`` = α / batch. Also compiled as
    the CUDA device function, so both backends share this math."""
    one_minus = 1.0 - a * a
    d_u = d_a * one_minus + scale * 2.0 * a * one_minus / (one_minus + 1e-6)
    if api.LOG_STD_MIN < raw_log_std < api.LOG_STD_MAX:
        return d_u, d_u * math.exp(raw_log_std) * eps - scale
    return d_u, 0.0


@njit(**JIT_FAST)
def gaussian_tanh_backward_kernel(actor_out, noise, action, d_action, log_alpha, d_actor_out):
    batch, a_dim = action.shape
    scale = math.exp(log_alpha[0]) / batch
    for i in range(batch):
        for j in range(a_dim):
            d_actor_out[i, j], d_actor_out[i, a_dim + j] = gaussian_tanh_grad(
                np.float64(action[i, j]), d_action[i, j], actor_out[i, a_dim + j], noise[i, j], scale
            )


@njit(**JIT_FAST)
def soft_td_target_kernel(reward, terminated, q1, q2, log_prob, log_alpha, gamma, target):
    alpha = math.exp(log_alpha[0])
    for i in range(reward.shape[0]):
        soft_q = min(q1[i, 0], q2[i, 0]) - alpha * log_prob[i, 0]
        target[i, 0] = reward[i] + (0.0 if terminated[i] else gamma * soft_q)


@njit(**JIT_FAST)
def entropy_temperature_gradient_kernel(log_prob, target_entropy, grad):
    total = 0.0
    for i in range(log_prob.shape[0]):
        total += log_prob[i, 0] + target_entropy
    grad[0] = -total / log_prob.shape[0]


@njit(**JIT_FAST)
def select_min_rows_kernel(a, b, x, y, out):
    for i in range(x.shape[0]):
        source = x if a[i, 0] <= b[i, 0] else y
        for j in range(x.shape[1]):
            out[i, j] = source[i, j]


# Learner statistics: batch sums in float64 by ``lanes`` lanes (one here, in row order; a block's
# threads on CUDA), see dispatchrl.backends.cpu.one_lane. Lanes past ``lanes`` take no rows.


@njit(**JIT_EXACT_INNER)
def accumulate_critic_stats_lanes(lane, lanes, partial, q1, q2, target, stats):
    first = lane if lane < lanes else q1.shape[0]
    loss, q = 0.0, 0.0
    for i in range(first, q1.shape[0], lanes):
        e1, e2 = np.float64(q1[i, 0]) - target[i, 0], np.float64(q2[i, 0]) - target[i, 0]
        loss += e1 * e1 + e2 * e2
        q += np.float64(q1[i, 0]) + q2[i, 0]
    loss = lanes_total(partial, loss, lane, lanes)
    q = lanes_total(partial, q, lane, lanes)
    if lane == 0:
        stats[0] += 1.0
        stats[1] += loss / q1.shape[0]
        stats[2] += q / (2 * q1.shape[0])


@njit(**JIT_EXACT_INNER)
def accumulate_actor_stats_lanes(lane, lanes, partial, q, stats):
    first = lane if lane < lanes else q.shape[0]
    total = 0.0
    for i in range(first, q.shape[0], lanes):
        total += np.float64(q[i, 0])
    total = lanes_total(partial, total, lane, lanes)
    if lane == 0:
        stats[0] += 1.0
        stats[1] -= total / q.shape[0]


@njit(**JIT_EXACT_INNER)
def accumulate_sac_actor_stats_lanes(lane, lanes, partial, q1, q2, log_prob, log_alpha, stats):
    first = lane if lane < lanes else q1.shape[0]
    alpha = math.exp(np.float64(log_alpha[0]))
    loss, log_prob_sum = 0.0, 0.0
    for i in range(first, q1.shape[0], lanes):
        log_prob_i = np.float64(log_prob[i, 0])  # float64 sums (the simulator's numpy would keep float32)
        loss += alpha * log_prob_i - min(np.float64(q1[i, 0]), np.float64(q2[i, 0]))
        log_prob_sum += log_prob_i
    loss = lanes_total(partial, loss, lane, lanes)
    log_prob_sum = lanes_total(partial, log_prob_sum, lane, lanes)
    if lane == 0:
        stats[0] += 1.0
        stats[1] += loss / q1.shape[0]
        stats[2] -= log_prob_sum / q1.shape[0]


accumulate_critic_stats_kernel = one_lane(
    accumulate_critic_stats_lanes, "accumulate_critic_stats_kernel", "1", "JIT_EXACT"
)
accumulate_actor_stats_kernel = one_lane(
    accumulate_actor_stats_lanes, "accumulate_actor_stats_kernel", "1", "JIT_EXACT"
)
accumulate_sac_actor_stats_kernel = one_lane(
    accumulate_sac_actor_stats_lanes, "accumulate_sac_actor_stats_kernel", "1", "JIT_EXACT"
)


# ---------------------------------------------------------------- DQN
# Element bodies (one row each) that the CUDA kernels are generated from too.


@njit(**JIT_EXACT_INNER)
def taken_column(action, i, k):
    """Row ``i``'s taken action as a column index (a stored index is in range; the clamp keeps a
    corrupt one inside the row)."""
    return min(max(np.int64(action[i, 0]), 0), k - 1)


@njit(**JIT_EXACT_INNER)
def epsilon_greedy_at(i, rng, q, step, initial_eps, final_eps, decay_steps, action):
    """Row ``i`` of epsilon_greedy: stream positions 2i (explore?) and 2i + 1 (which index)."""
    k = q.shape[1]
    eps = initial_eps + (final_eps - initial_eps) * min(1.0, np.float64(step[0]) / decay_steps)
    if uniform01(rng[0], rng[1] + np.uint64(2 * i)) < eps:
        chosen = min(np.int64(uniform01(rng[0], rng[1] + np.uint64(2 * i + 1)) * k), k - 1)
    else:
        chosen = row_argmax(q, i)
    action[i, 0] = chosen


@njit(**JIT_EXACT)
def epsilon_greedy_kernel(rng, q, step, initial_eps, final_eps, decay_steps, action):
    for i in range(q.shape[0]):
        epsilon_greedy_at(i, rng, q, step, initial_eps, final_eps, decay_steps, action)
    rng[1] = rng[1] + np.uint64(2 * q.shape[0])


@njit(**JIT_EXACT_INNER)
def dqn_target_at(i, q_next_online, q_next_target, reward, terminated, gamma, target, double):
    """Row ``i`` of dqn_targets."""
    chosen = row_argmax(q_next_online if double else q_next_target, i)
    bootstrap = 0.0 if terminated[i] else gamma * np.float64(q_next_target[i, chosen])
    target[i, 0] = reward[i] + bootstrap


@njit(**JIT_EXACT)
def dqn_targets_kernel(q_next_online, q_next_target, reward, terminated, gamma, target, double):
    for i in range(reward.shape[0]):
        dqn_target_at(i, q_next_online, q_next_target, reward, terminated, gamma, target, double)


@njit(**JIT_EXACT_INNER)
def q_huber_gradient_at(i, q, action, target, d_q):
    """Row ``i`` of q_huber_gradient."""
    k = q.shape[1]
    taken = taken_column(action, i, k)
    for j in range(k):
        d_q[i, j] = 0.0
    error = np.float64(q[i, taken]) - target[i, 0]
    d_q[i, taken] = min(max(error, -1.0), 1.0) / q.shape[0]


@njit(**JIT_EXACT)
def q_huber_gradient_kernel(q, action, target, d_q):
    for i in range(q.shape[0]):
        q_huber_gradient_at(i, q, action, target, d_q)


@njit(**JIT_EXACT)
def accumulate_q_stats_kernel(q, action, target, stats):
    loss, total = 0.0, 0.0
    for i in range(q.shape[0]):
        taken = np.float64(q[i, taken_column(action, i, q.shape[1])])
        error = abs(taken - target[i, 0])
        loss += 0.5 * error * error if error <= 1.0 else error - 0.5
        total += taken
    stats[0] += 1.0
    stats[1] += loss / q.shape[0]
    stats[2] += total / q.shape[0]


@njit(**JIT_EXACT_INNER)
def taken_q_at(i, q, action, out):
    """Row ``i`` of taken_q."""
    out[i, 0] = q[i, taken_column(action, i, q.shape[1])]


@njit(**JIT_EXACT)
def taken_q_kernel(q, action, out):
    for i in range(q.shape[0]):
        taken_q_at(i, q, action, out)


@njit(**JIT_EXACT_INNER)
def dueling_q_at(i, raw, q):
    """Row ``i`` of dueling_q: V + A_j - mean(A), the advantages summed in column order."""
    n = q.shape[1]
    total = 0.0
    for j in range(n):
        total += np.float64(raw[i, 1 + j])
    mean = total / n
    for j in range(n):
        q[i, j] = np.float64(raw[i, 0]) + np.float64(raw[i, 1 + j]) - mean


@njit(**JIT_EXACT)
def dueling_q_kernel(raw, q):
    for i in range(q.shape[0]):
        dueling_q_at(i, raw, q)


@njit(**JIT_EXACT_INNER)
def dueling_q_backward_at(i, d_q, d_raw):
    """Row ``i`` of dueling_q_backward: V's gradient is the row's sum, A_j's its own less the mean."""
    n = d_q.shape[1]
    total = 0.0
    for j in range(n):
        total += np.float64(d_q[i, j])
    d_raw[i, 0] = total
    mean = total / n
    for j in range(n):
        d_raw[i, 1 + j] = np.float64(d_q[i, j]) - mean


@njit(**JIT_EXACT)
def dueling_q_backward_kernel(d_q, d_raw):
    for i in range(d_q.shape[0]):
        dueling_q_backward_at(i, d_q, d_raw)
