"""CUDA methods of the off-policy generic functions (one thread per row or element)."""

import math

import numpy as np
from numba import cuda

from ...backends.cuda import Launch, block_form, device_twin, flat, launch_1d, launch_2d
from ...devices import CUDA
from ...staging import launch
from ..core.cuda import increment_kernel
from ..random.cuda import standard_normal, uniform01
from . import api, cpu
from .api import transition_arrays

__all__ = ["gaussian_tanh_grad"]

gaussian_tanh_grad = device_twin(cpu.gaussian_tanh_grad)


@cuda.jit(device=True)
def _replay_add_at(
    i,
    obs,
    action,
    reward,
    next_obs,
    terminated,
    truncated,
    b_obs,
    b_action,
    b_reward,
    b_next_obs,
    b_terminated,
    b_truncated,
    position,
):
    row = (position[0] + i) % b_obs.shape[0]
    for j in range(obs.shape[1]):
        b_obs[row, j] = obs[i, j]
        b_next_obs[row, j] = next_obs[i, j]
    for j in range(action.shape[1]):
        b_action[row, j] = action[i, j]
    b_reward[row] = reward[i]
    b_terminated[row] = terminated[i]
    b_truncated[row] = truncated[i]


@cuda.jit
def replay_add_kernel(
    obs,
    action,
    reward,
    next_obs,
    terminated,
    truncated,
    b_obs,
    b_action,
    b_reward,
    b_next_obs,
    b_terminated,
    b_truncated,
    position,
):
    i = cuda.grid(1)
    if i < obs.shape[0]:
        _replay_add_at(
            i,
            obs,
            action,
            reward,
            next_obs,
            terminated,
            truncated,
            b_obs,
            b_action,
            b_reward,
            b_next_obs,
            b_terminated,
            b_truncated,
            position,
        )


@block_form(replay_add_kernel, lambda obs, *rest: (obs.shape[0],))
@cuda.jit(device=True)
def replay_add_block(
    obs,
    action,
    reward,
    next_obs,
    terminated,
    truncated,
    b_obs,
    b_action,
    b_reward,
    b_next_obs,
    b_terminated,
    b_truncated,
    position,
    rows,
):
    for i in range(cuda.threadIdx.x, rows, cuda.blockDim.x):
        _replay_add_at(
            i,
            obs,
            action,
            reward,
            next_obs,
            terminated,
            truncated,
            b_obs,
            b_action,
            b_reward,
            b_next_obs,
            b_terminated,
            b_truncated,
            position,
        )


@cuda.jit(device=True)
def _advance_ring(position, size, rows, capacity):
    position[0] = (position[0] + rows) % capacity
    size[0] = min(size[0] + rows, capacity)


@cuda.jit
def advance_ring_kernel(position, size, rows, capacity):
    if cuda.grid(1) == 0:  # after every row was written at the old position
        _advance_ring(position, size, rows, capacity)


@block_form(advance_ring_kernel)
@cuda.jit(device=True)
def advance_ring_block(position, size, rows, capacity):
    if cuda.threadIdx.x == 0:
        _advance_ring(position, size, rows, capacity)


@api.replay_add.dispatch
def replay_add(device: CUDA, buffer, obs, action, reward, next_obs, terminated, truncated):
    launch_1d(
        device,
        replay_add_kernel,
        obs.shape[0],
        obs,
        action,
        reward,
        next_obs,
        terminated,
        truncated,
        *transition_arrays(buffer),
        buffer.position,
    )
    launch(
        device, Launch(advance_ring_kernel, (1,), (1,)), buffer.position, buffer.size, obs.shape[0], buffer.obs.shape[0]
    )


@cuda.jit
def replay_sample_kernel(
    rng,
    b_obs,
    b_action,
    b_reward,
    b_next_obs,
    b_terminated,
    b_truncated,
    size,
    obs,
    action,
    reward,
    next_obs,
    terminated,
    truncated,
):
    k = cuda.grid(1)
    if k < obs.shape[0]:
        _replay_sample_at(
            k,
            rng,
            b_obs,
            b_action,
            b_reward,
            b_next_obs,
            b_terminated,
            b_truncated,
            size,
            obs,
            action,
            reward,
            next_obs,
            terminated,
            truncated,
        )


@cuda.jit(device=True)
def _replay_sample_at(
    k,
    rng,
    b_obs,
    b_action,
    b_reward,
    b_next_obs,
    b_terminated,
    b_truncated,
    size,
    obs,
    action,
    reward,
    next_obs,
    terminated,
    truncated,
):
    row = np.int64(uniform01(rng[0], rng[1] + np.uint64(k)) * size[0])
    for j in range(obs.shape[1]):
        obs[k, j] = b_obs[row, j]
        next_obs[k, j] = b_next_obs[row, j]
    for j in range(action.shape[1]):
        action[k, j] = b_action[row, j]
    reward[k] = b_reward[row]
    terminated[k] = b_terminated[row]
    truncated[k] = b_truncated[row]


@block_form(replay_sample_kernel, lambda rng, *buffer_size_batch: (buffer_size_batch[7].shape[0],))
@cuda.jit(device=True)
def replay_sample_block(
    rng,
    b_obs,
    b_action,
    b_reward,
    b_next_obs,
    b_terminated,
    b_truncated,
    size,
    obs,
    action,
    reward,
    next_obs,
    terminated,
    truncated,
    rows,
):
    for k in range(cuda.threadIdx.x, rows, cuda.blockDim.x):
        _replay_sample_at(
            k,
            rng,
            b_obs,
            b_action,
            b_reward,
            b_next_obs,
            b_terminated,
            b_truncated,
            size,
            obs,
            action,
            reward,
            next_obs,
            terminated,
            truncated,
        )


@api.replay_sample.dispatch
def replay_sample(device: CUDA, rng, buffer, batch):
    rows = batch.obs.shape[0]
    launch_1d(
        device, replay_sample_kernel, rows, rng, *transition_arrays(buffer), buffer.size, *transition_arrays(batch)
    )
    launch(device, Launch(increment_kernel, (1,), (1,)), rng, 1, np.uint64(rows))


@cuda.jit
def concat_columns_kernel(a, b, out):
    i, j = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        out[i, j] = a[i, j] if j < a.shape[1] else b[i, j - a.shape[1]]


@block_form(concat_columns_kernel, lambda a, b, out: (out.shape[0], out.shape[1], a.shape[1]))
@cuda.jit(device=True)
def concat_columns_block(a, b, out, rows, cols, split):
    for k in range(cuda.threadIdx.x, rows * cols, cuda.blockDim.x):
        i, j = k // cols, k % cols
        out[i, j] = a[i, j] if j < split else b[i, j - split]


@api.concat_columns.dispatch
def concat_columns(device: CUDA, a, b, out):
    launch_2d(device, concat_columns_kernel, out.shape, a, b, out)


@cuda.jit
def slice_columns_kernel(x, start, out):
    i, j = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        out[i, j] = x[i, start + j]


@block_form(slice_columns_kernel, lambda x, start, out: out.shape)
@cuda.jit(device=True)
def slice_columns_block(x, start, out, rows, cols):
    for k in range(cuda.threadIdx.x, rows * cols, cuda.blockDim.x):
        out[k // cols, k % cols] = x[k // cols, start + k % cols]


@api.slice_columns.dispatch
def slice_columns(device: CUDA, x, start, out):
    launch_2d(device, slice_columns_kernel, out.shape, x, start, out)


@cuda.jit(device=True)
def _add_clipped_noise_at(i, rng, x, std, noise_clip, low, high):
    noise = min(max(std * standard_normal(rng[0], rng[1] + np.uint64(2 * i)), -noise_clip), noise_clip)
    x[i] = min(max(x[i] + noise, low), high)


@cuda.jit
def add_clipped_noise_kernel(rng, x, std, noise_clip, low, high):
    i = cuda.grid(1)
    if i < x.size:
        _add_clipped_noise_at(i, rng, x, std, noise_clip, low, high)


@block_form(add_clipped_noise_kernel, lambda rng, x, *bounds: (x.size,))
@cuda.jit(device=True)
def add_clipped_noise_block(rng, x, std, noise_clip, low, high, size):
    for i in range(cuda.threadIdx.x, size, cuda.blockDim.x):
        _add_clipped_noise_at(i, rng, x, std, noise_clip, low, high)


@api.add_clipped_noise.dispatch
def add_clipped_noise(device: CUDA, rng, x, std, noise_clip, low, high):
    launch_1d(device, add_clipped_noise_kernel, x.size, rng, flat(x), std, noise_clip, low, high)
    launch(device, Launch(increment_kernel, (1,), (1,)), rng, 1, np.uint64(2 * x.size))


@cuda.jit(device=True)
def _td_target_at(i, reward, terminated, q1, q2, gamma, target):
    bootstrap = 0.0 if terminated[i] else gamma * min(q1[i, 0], q2[i, 0])
    target[i, 0] = reward[i] + bootstrap


@cuda.jit
def td_target_kernel(reward, terminated, q1, q2, gamma, target):
    i = cuda.grid(1)
    if i < reward.shape[0]:
        _td_target_at(i, reward, terminated, q1, q2, gamma, target)


@block_form(td_target_kernel, lambda reward, *rest: (reward.shape[0],))
@cuda.jit(device=True)
def td_target_block(reward, terminated, q1, q2, gamma, target, rows):
    for i in range(cuda.threadIdx.x, rows, cuda.blockDim.x):
        _td_target_at(i, reward, terminated, q1, q2, gamma, target)


@api.td_target.dispatch
def td_target(device: CUDA, reward, terminated, q1, q2, gamma, target):
    launch_1d(device, td_target_kernel, reward.shape[0], reward, terminated, q1, q2, gamma, target)


@cuda.jit
def track_episodes_kernel(
    reward, terminated, truncated, step, running_return, running_length, returns, lengths, end_steps, count
):
    i = cuda.grid(1)
    if i < reward.shape[0]:
        _track_episodes_at(
            i, reward, terminated, truncated, step, running_return, running_length, returns, lengths, end_steps, count
        )


@cuda.jit(device=True)
def _track_episodes_at(
    i, reward, terminated, truncated, step, running_return, running_length, returns, lengths, end_steps, count
):
    running_return[i] += reward[i]
    running_length[i] += 1
    if terminated[i] or truncated[i]:
        slot = cuda.atomic.add(count, 0, 1)
        at = slot % returns.shape[0]  # a ring: the driver reads it at every chunk boundary
        returns[at] = running_return[i]
        lengths[at] = running_length[i]
        end_steps[at] = step[0]
        running_return[i] = 0.0
        running_length[i] = 0


@block_form(track_episodes_kernel, lambda reward, *rest: (reward.shape[0],))
@cuda.jit(device=True)
def track_episodes_block(
    reward, terminated, truncated, step, running_return, running_length, returns, lengths, end_steps, count, rows
):
    for i in range(cuda.threadIdx.x, rows, cuda.blockDim.x):
        _track_episodes_at(
            i, reward, terminated, truncated, step, running_return, running_length, returns, lengths, end_steps, count
        )


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
        log.running_return,
        log.running_length,
        log.returns,
        log.lengths,
        log.end_steps,
        log.count,
    )


@cuda.jit(device=True)
def _gaussian_tanh_sample_at(i, rng, actor_out, noise, action, log_prob, a_dim):
    total = 0.0
    for j in range(a_dim):
        eps = standard_normal(rng[0], rng[1] + np.uint64(2 * (i * a_dim + j)))
        log_std = min(max(np.float64(actor_out[i, a_dim + j]), api.LOG_STD_MIN), api.LOG_STD_MAX)
        a = math.tanh(actor_out[i, j] + math.exp(log_std) * eps)
        noise[i, j] = eps
        action[i, j] = a
        total += -0.5 * eps * eps - log_std - 0.5 * math.log(2 * math.pi) - math.log(1.0 - a * a + 1e-6)
    log_prob[i, 0] = total


@cuda.jit
def gaussian_tanh_sample_kernel(rng, actor_out, noise, action, log_prob):
    i = cuda.grid(1)
    batch, a_dim = action.shape
    if i < batch:
        _gaussian_tanh_sample_at(i, rng, actor_out, noise, action, log_prob, a_dim)


@block_form(gaussian_tanh_sample_kernel, lambda rng, actor_out, noise, action, log_prob: action.shape)
@cuda.jit(device=True)
def gaussian_tanh_sample_block(rng, actor_out, noise, action, log_prob, batch, a_dim):
    for i in range(cuda.threadIdx.x, batch, cuda.blockDim.x):
        _gaussian_tanh_sample_at(i, rng, actor_out, noise, action, log_prob, a_dim)


@api.gaussian_tanh_sample.dispatch
def gaussian_tanh_sample(device: CUDA, rng, actor_out, noise, action, log_prob):
    launch_1d(device, gaussian_tanh_sample_kernel, action.shape[0], rng, actor_out, noise, action, log_prob)
    launch(device, Launch(increment_kernel, (1,), (1,)), rng, 1, np.uint64(2 * action.size))


@cuda.jit(device=True)
def _gaussian_tanh_backward_at(i, j, actor_out, noise, action, d_action, log_alpha, d_actor_out, batch, a_dim):
    d_mean, d_log_std = gaussian_tanh_grad(
        np.float64(action[i, j]),
        d_action[i, j],
        actor_out[i, a_dim + j],
        noise[i, j],
        math.exp(log_alpha[0]) / batch,
    )
    d_actor_out[i, j] = d_mean
    d_actor_out[i, a_dim + j] = d_log_std


@cuda.jit
def gaussian_tanh_backward_kernel(actor_out, noise, action, d_action, log_alpha, d_actor_out):
    i, j = cuda.grid(2)
    batch, a_dim = action.shape
    if i < batch and j < a_dim:
        _gaussian_tanh_backward_at(i, j, actor_out, noise, action, d_action, log_alpha, d_actor_out, batch, a_dim)


@block_form(gaussian_tanh_backward_kernel, lambda actor_out, noise, action, *rest: action.shape)
@cuda.jit(device=True)
def gaussian_tanh_backward_block(actor_out, noise, action, d_action, log_alpha, d_actor_out, batch, a_dim):
    for k in range(cuda.threadIdx.x, batch * a_dim, cuda.blockDim.x):
        _gaussian_tanh_backward_at(
            k // a_dim, k % a_dim, actor_out, noise, action, d_action, log_alpha, d_actor_out, batch, a_dim
        )


@api.gaussian_tanh_backward.dispatch
def gaussian_tanh_backward(device: CUDA, actor_out, noise, action, d_action, log_alpha, d_actor_out):
    launch_2d(
        device, gaussian_tanh_backward_kernel, action.shape, actor_out, noise, action, d_action, log_alpha, d_actor_out
    )


@cuda.jit(device=True)
def _soft_td_target_at(i, reward, terminated, q1, q2, log_prob, log_alpha, gamma, target):
    soft_q = min(q1[i, 0], q2[i, 0]) - math.exp(log_alpha[0]) * log_prob[i, 0]
    target[i, 0] = reward[i] + (0.0 if terminated[i] else gamma * soft_q)


@cuda.jit
def soft_td_target_kernel(reward, terminated, q1, q2, log_prob, log_alpha, gamma, target):
    i = cuda.grid(1)
    if i < reward.shape[0]:
        _soft_td_target_at(i, reward, terminated, q1, q2, log_prob, log_alpha, gamma, target)


@block_form(soft_td_target_kernel, lambda reward, *rest: (reward.shape[0],))
@cuda.jit(device=True)
def soft_td_target_block(reward, terminated, q1, q2, log_prob, log_alpha, gamma, target, rows):
    for i in range(cuda.threadIdx.x, rows, cuda.blockDim.x):
        _soft_td_target_at(i, reward, terminated, q1, q2, log_prob, log_alpha, gamma, target)


@api.soft_td_target.dispatch
def soft_td_target(device: CUDA, reward, terminated, q1, q2, log_prob, log_alpha, gamma, target):
    launch_1d(
        device, soft_td_target_kernel, reward.shape[0], reward, terminated, q1, q2, log_prob, log_alpha, gamma, target
    )


@cuda.jit(device=True)
def _entropy_temperature_gradient(log_prob, target_entropy, grad):
    total = 0.0
    for i in range(log_prob.shape[0]):
        total += log_prob[i, 0] + target_entropy
    grad[0] = -total / log_prob.shape[0]


@cuda.jit
def entropy_temperature_gradient_kernel(log_prob, target_entropy, grad):
    if cuda.grid(1) == 0:  # batch-sized reduction: one thread is enough
        _entropy_temperature_gradient(log_prob, target_entropy, grad)


@block_form(entropy_temperature_gradient_kernel)
@cuda.jit(device=True)
def entropy_temperature_gradient_block(log_prob, target_entropy, grad):
    if cuda.threadIdx.x == 0:  # the same order of sums as the launch
        _entropy_temperature_gradient(log_prob, target_entropy, grad)


@api.entropy_temperature_gradient.dispatch
def entropy_temperature_gradient(device: CUDA, log_prob, target_entropy, grad):
    launch(device, Launch(entropy_temperature_gradient_kernel, (1,), (1,)), log_prob, target_entropy, grad)


@cuda.jit
def select_min_rows_kernel(a, b, x, y, out):
    i, j = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        out[i, j] = x[i, j] if a[i, 0] <= b[i, 0] else y[i, j]


@block_form(select_min_rows_kernel, lambda a, b, x, y, out: out.shape)
@cuda.jit(device=True)
def select_min_rows_block(a, b, x, y, out, rows, cols):
    for k in range(cuda.threadIdx.x, rows * cols, cuda.blockDim.x):
        i, j = k // cols, k % cols
        out[i, j] = x[i, j] if a[i, 0] <= b[i, 0] else y[i, j]


@api.select_min_rows.dispatch
def select_min_rows(device: CUDA, a, b, x, y, out):
    launch_2d(device, select_min_rows_kernel, out.shape, a, b, x, y, out)


# learner statistics: batch-sized float64 sums, one thread each (the CPU kernels' order of sums)


@cuda.jit(device=True)
def _accumulate_critic_stats(q1, q2, target, stats):
    loss, q = 0.0, 0.0
    for i in range(q1.shape[0]):
        e1, e2 = np.float64(q1[i, 0]) - target[i, 0], np.float64(q2[i, 0]) - target[i, 0]
        loss += e1 * e1 + e2 * e2
        q += np.float64(q1[i, 0]) + q2[i, 0]
    stats[0] += 1.0
    stats[1] += loss / q1.shape[0]
    stats[2] += q / (2 * q1.shape[0])


@cuda.jit
def accumulate_critic_stats_kernel(q1, q2, target, stats):
    if cuda.grid(1) == 0:
        _accumulate_critic_stats(q1, q2, target, stats)


@block_form(accumulate_critic_stats_kernel)
@cuda.jit(device=True)
def accumulate_critic_stats_block(q1, q2, target, stats):
    if cuda.threadIdx.x == 0:
        _accumulate_critic_stats(q1, q2, target, stats)


@api.accumulate_critic_stats.dispatch
def accumulate_critic_stats(device: CUDA, q1, q2, target, stats):
    launch(device, Launch(accumulate_critic_stats_kernel, (1,), (1,)), q1, q2, target, stats)


@cuda.jit(device=True)
def _accumulate_actor_stats(q, stats):
    total = 0.0
    for i in range(q.shape[0]):
        total += np.float64(q[i, 0])
    stats[0] += 1.0
    stats[1] -= total / q.shape[0]


@cuda.jit
def accumulate_actor_stats_kernel(q, stats):
    if cuda.grid(1) == 0:
        _accumulate_actor_stats(q, stats)


@block_form(accumulate_actor_stats_kernel)
@cuda.jit(device=True)
def accumulate_actor_stats_block(q, stats):
    if cuda.threadIdx.x == 0:
        _accumulate_actor_stats(q, stats)


@api.accumulate_actor_stats.dispatch
def accumulate_actor_stats(device: CUDA, q, stats):
    launch(device, Launch(accumulate_actor_stats_kernel, (1,), (1,)), q, stats)


@cuda.jit(device=True)
def _accumulate_sac_actor_stats(q1, q2, log_prob, log_alpha, stats):
    alpha = math.exp(np.float64(log_alpha[0]))
    loss, log_prob_sum = 0.0, 0.0
    for i in range(q1.shape[0]):
        log_prob_i = np.float64(log_prob[i, 0])  # float64 sums (the simulator's numpy would keep float32)
        loss += alpha * log_prob_i - min(np.float64(q1[i, 0]), np.float64(q2[i, 0]))
        log_prob_sum += log_prob_i
    stats[0] += 1.0
    stats[1] += loss / q1.shape[0]
    stats[2] -= log_prob_sum / q1.shape[0]


@cuda.jit
def accumulate_sac_actor_stats_kernel(q1, q2, log_prob, log_alpha, stats):
    if cuda.grid(1) == 0:
        _accumulate_sac_actor_stats(q1, q2, log_prob, log_alpha, stats)


@block_form(accumulate_sac_actor_stats_kernel)
@cuda.jit(device=True)
def accumulate_sac_actor_stats_block(q1, q2, log_prob, log_alpha, stats):
    if cuda.threadIdx.x == 0:
        _accumulate_sac_actor_stats(q1, q2, log_prob, log_alpha, stats)


@api.accumulate_sac_actor_stats.dispatch
def accumulate_sac_actor_stats(device: CUDA, q1, q2, log_prob, log_alpha, stats):
    launch(device, Launch(accumulate_sac_actor_stats_kernel, (1,), (1,)), q1, q2, log_prob, log_alpha, stats)
