"""CUDA methods of the replay generic functions. Tree writes run in one thread (rows in order,
as on every other device: a repeated index keeps its last value); draws and gathers run one
thread per row."""

import numpy as np
from numba import cuda

from ...backends.cuda import Launch, block_form, device_twin, launch_1d, launch_2d
from ...devices import CUDA
from ...staging import launch
from ..core.cuda import increment_kernel
from ..offpolicy.api import transition_arrays
from ..random.cuda import uniform01
from . import api, cpu

__all__: list[str] = []


@cuda.jit(device=True)
def select_float(condition, if_true, if_false):
    """cpu.select_float's value (there an intrinsic that keeps a CPU select branch-free)."""
    return if_true if condition else if_false


set_leaf = device_twin(cpu.set_leaf, select_float=select_float)
tree_descend = device_twin(cpu.tree_descend, select_float=select_float)


@cuda.jit(device=True)
def _priority_mark_new(sum_tree, min_tree, max_priority, position, count, capacity, alpha, eps):
    value = (max_priority[0] + eps) ** alpha
    for i in range(count):
        set_leaf(sum_tree, min_tree, (position[0] + i) % capacity, value)


@cuda.jit
def priority_mark_new_kernel(sum_tree, min_tree, max_priority, position, count, capacity, alpha, eps):
    if cuda.grid(1) == 0:
        _priority_mark_new(sum_tree, min_tree, max_priority, position, count, capacity, alpha, eps)


@block_form(priority_mark_new_kernel)
@cuda.jit(device=True)
def priority_mark_new_block(sum_tree, min_tree, max_priority, position, count, capacity, alpha, eps):
    if cuda.threadIdx.x == 0:  # tree writes in row order, as on every device
        _priority_mark_new(sum_tree, min_tree, max_priority, position, count, capacity, alpha, eps)


@api.priority_mark_new.dispatch
def priority_mark_new(device: CUDA, sum_tree, min_tree, max_priority, position, count, capacity, alpha, eps):
    launch(
        device,
        Launch(priority_mark_new_kernel, (1,), (1,)),
        sum_tree,
        min_tree,
        max_priority,
        position,
        count,
        capacity,
        alpha,
        eps,
    )


@cuda.jit(device=True)
def _priority_update(sum_tree, min_tree, max_priority, index, priority, alpha, eps):
    for i in range(index.shape[0]):
        p = abs(np.float64(priority[i]))
        if p > max_priority[0]:
            max_priority[0] = p
        set_leaf(sum_tree, min_tree, index[i], (p + eps) ** alpha)


@cuda.jit
def priority_update_kernel(sum_tree, min_tree, max_priority, index, priority, alpha, eps):
    if cuda.grid(1) == 0:
        _priority_update(sum_tree, min_tree, max_priority, index, priority, alpha, eps)


@block_form(priority_update_kernel)
@cuda.jit(device=True)
def priority_update_block(sum_tree, min_tree, max_priority, index, priority, alpha, eps):
    if cuda.threadIdx.x == 0:
        _priority_update(sum_tree, min_tree, max_priority, index, priority, alpha, eps)


@api.priority_update.dispatch
def priority_update(device: CUDA, sum_tree, min_tree, max_priority, index, priority, alpha, eps):
    launch(
        device,
        Launch(priority_update_kernel, (1,), (1,)),
        sum_tree,
        min_tree,
        max_priority,
        index,
        priority,
        alpha,
        eps,
    )


@cuda.jit(device=True)
def _priority_sample_at(k, rng, sum_tree, min_tree, size, beta, index, weight):
    leaves = sum_tree.shape[0] // 2
    row = tree_descend(sum_tree, uniform01(rng[0], rng[1] + np.uint64(k)) * sum_tree[1])
    if row > size[0] - 1:
        row = size[0] - 1
    index[k] = row
    weight[k] = (sum_tree[leaves + row] / min_tree[1]) ** -beta[0]


@cuda.jit
def priority_sample_kernel(rng, sum_tree, min_tree, size, beta, index, weight):
    k = cuda.grid(1)
    if k < index.shape[0]:
        _priority_sample_at(k, rng, sum_tree, min_tree, size, beta, index, weight)


@block_form(priority_sample_kernel, lambda rng, sum_tree, min_tree, size, beta, index, weight: index.shape)
@cuda.jit(device=True)
def priority_sample_block(rng, sum_tree, min_tree, size, beta, index, weight, rows):
    for k in range(cuda.threadIdx.x, rows, cuda.blockDim.x):
        _priority_sample_at(k, rng, sum_tree, min_tree, size, beta, index, weight)


@api.priority_sample.dispatch
def priority_sample(device: CUDA, rng, sum_tree, min_tree, size, beta, index, weight):
    rows = index.shape[0]
    launch_1d(device, priority_sample_kernel, rows, rng, sum_tree, min_tree, size, beta, index, weight)
    launch(device, Launch(increment_kernel, (1,), (1,)), rng, 1, np.uint64(rows))


@cuda.jit
def replay_gather_kernel(
    index,
    b_obs,
    b_action,
    b_reward,
    b_next_obs,
    b_terminated,
    b_truncated,
    obs,
    action,
    reward,
    next_obs,
    terminated,
    truncated,
):
    k = cuda.grid(1)
    if k < index.shape[0]:
        _replay_gather_at(
            k,
            index,
            b_obs,
            b_action,
            b_reward,
            b_next_obs,
            b_terminated,
            b_truncated,
            obs,
            action,
            reward,
            next_obs,
            terminated,
            truncated,
        )


@cuda.jit(device=True)
def _replay_gather_at(
    k,
    index,
    b_obs,
    b_action,
    b_reward,
    b_next_obs,
    b_terminated,
    b_truncated,
    obs,
    action,
    reward,
    next_obs,
    terminated,
    truncated,
):
    row = index[k]
    for j in range(obs.shape[1]):
        obs[k, j] = b_obs[row, j]
        next_obs[k, j] = b_next_obs[row, j]
    for j in range(action.shape[1]):
        action[k, j] = b_action[row, j]
    reward[k] = b_reward[row]
    terminated[k] = b_terminated[row]
    truncated[k] = b_truncated[row]


@block_form(replay_gather_kernel, lambda index, *rest: index.shape)
@cuda.jit(device=True)
def replay_gather_block(
    index,
    b_obs,
    b_action,
    b_reward,
    b_next_obs,
    b_terminated,
    b_truncated,
    obs,
    action,
    reward,
    next_obs,
    terminated,
    truncated,
    rows,
):
    for k in range(cuda.threadIdx.x, rows, cuda.blockDim.x):
        _replay_gather_at(
            k,
            index,
            b_obs,
            b_action,
            b_reward,
            b_next_obs,
            b_terminated,
            b_truncated,
            obs,
            action,
            reward,
            next_obs,
            terminated,
            truncated,
        )


@api.replay_gather.dispatch
def replay_gather(device: CUDA, buffer, index, batch):
    launch_1d(
        device, replay_gather_kernel, index.shape[0], index, *transition_arrays(buffer), *transition_arrays(batch)
    )


@cuda.jit
def scale_rows_kernel(weight, x):
    i, j = cuda.grid(2)
    if i < x.shape[0] and j < x.shape[1]:
        x[i, j] *= weight[i]


@block_form(scale_rows_kernel, lambda weight, x: x.shape)
@cuda.jit(device=True)
def scale_rows_block(weight, x, rows, cols):
    for k in range(cuda.threadIdx.x, rows * cols, cuda.blockDim.x):
        x[k // cols, k % cols] *= weight[k // cols]


@api.scale_rows.dispatch
def scale_rows(device: CUDA, weight, x):
    launch_2d(device, scale_rows_kernel, x.shape, weight, x)


@cuda.jit
def td_priority_kernel(q1, q2, target, priority):
    i = cuda.grid(1)
    if i < priority.shape[0]:
        priority[i] = (abs(q1[i, 0] - target[i, 0]) + abs(q2[i, 0] - target[i, 0])) * 0.5


@block_form(td_priority_kernel, lambda q1, q2, target, priority: priority.shape)
@cuda.jit(device=True)
def td_priority_block(q1, q2, target, priority, rows):
    for i in range(cuda.threadIdx.x, rows, cuda.blockDim.x):
        priority[i] = (abs(q1[i, 0] - target[i, 0]) + abs(q2[i, 0] - target[i, 0])) * 0.5


@api.td_priority.dispatch
def td_priority(device: CUDA, q1, q2, target, priority):
    launch_1d(device, td_priority_kernel, priority.shape[0], q1, q2, target, priority)


@cuda.jit
def linear_anneal_kernel(step, start, end, steps, out):
    if cuda.grid(1) == 0:
        out[0] = start + (end - start) * min(1.0, np.float64(step[0]) / steps)


@block_form(linear_anneal_kernel)
@cuda.jit(device=True)
def linear_anneal_block(step, start, end, steps, out):
    if cuda.threadIdx.x == 0:
        out[0] = start + (end - start) * min(1.0, np.float64(step[0]) / steps)


@api.linear_anneal.dispatch
def linear_anneal(device: CUDA, step, start, end, steps, out):
    launch(device, Launch(linear_anneal_kernel, (1,), (1,)), step, start, end, steps, out)


@cuda.jit
def uniform_index_kernel(rng, size, index):
    k = cuda.grid(1)
    if k < index.shape[0]:
        index[k] = np.int64(uniform01(rng[0], rng[1] + np.uint64(k)) * size[0])


@block_form(uniform_index_kernel, lambda rng, size, index: index.shape)
@cuda.jit(device=True)
def uniform_index_block(rng, size, index, rows):
    for k in range(cuda.threadIdx.x, rows, cuda.blockDim.x):
        index[k] = np.int64(uniform01(rng[0], rng[1] + np.uint64(k)) * size[0])


@api.uniform_index.dispatch
def uniform_index(device: CUDA, rng, size, index):
    rows = index.shape[0]
    launch_1d(device, uniform_index_kernel, rows, rng, size, index)
    launch(device, Launch(increment_kernel, (1,), (1,)), rng, 1, np.uint64(rows))


n_step_row = device_twin(cpu.n_step_row)


@cuda.jit(device=True)
def _n_step_gather_at(
    k,
    index,
    b_obs,
    b_action,
    b_reward,
    b_next_obs,
    b_terminated,
    b_truncated,
    position,
    num_envs,
    n,
    gamma,
    obs,
    action,
    reward,
    next_obs,
    terminated,
    truncated,
    discount,
):
    first = index[k]
    for j in range(obs.shape[1]):
        obs[k, j] = b_obs[first, j]
    for j in range(action.shape[1]):
        action[k, j] = b_action[first, j]
    row = n_step_row(k, index, b_reward, b_terminated, b_truncated, position, num_envs, n, gamma, reward, discount)
    for j in range(obs.shape[1]):
        next_obs[k, j] = b_next_obs[row, j]
    terminated[k] = b_terminated[row]
    truncated[k] = b_truncated[row]


@cuda.jit
def n_step_gather_kernel(
    index,
    b_obs,
    b_action,
    b_reward,
    b_next_obs,
    b_terminated,
    b_truncated,
    position,
    num_envs,
    n,
    gamma,
    obs,
    action,
    reward,
    next_obs,
    terminated,
    truncated,
    discount,
):
    k = cuda.grid(1)
    if k < index.shape[0]:
        _n_step_gather_at(
            k,
            index,
            b_obs,
            b_action,
            b_reward,
            b_next_obs,
            b_terminated,
            b_truncated,
            position,
            num_envs,
            n,
            gamma,
            obs,
            action,
            reward,
            next_obs,
            terminated,
            truncated,
            discount,
        )


@block_form(n_step_gather_kernel, lambda index, *rest: index.shape)
@cuda.jit(device=True)
def n_step_gather_block(
    index,
    b_obs,
    b_action,
    b_reward,
    b_next_obs,
    b_terminated,
    b_truncated,
    position,
    num_envs,
    n,
    gamma,
    obs,
    action,
    reward,
    next_obs,
    terminated,
    truncated,
    discount,
    rows,
):
    for k in range(cuda.threadIdx.x, rows, cuda.blockDim.x):
        _n_step_gather_at(
            k,
            index,
            b_obs,
            b_action,
            b_reward,
            b_next_obs,
            b_terminated,
            b_truncated,
            position,
            num_envs,
            n,
            gamma,
            obs,
            action,
            reward,
            next_obs,
            terminated,
            truncated,
            discount,
        )


@api.n_step_gather.dispatch
def n_step_gather(device: CUDA, buffer, index, num_envs, n, gamma, batch, discount):
    launch_1d(
        device,
        n_step_gather_kernel,
        index.shape[0],
        index,
        *transition_arrays(buffer),
        buffer.position,
        num_envs,
        n,
        gamma,
        *transition_arrays(batch),
        discount,
    )


@cuda.jit
def bootstrap_target_kernel(reward, discount, target):
    i = cuda.grid(1)
    if i < reward.shape[0]:
        target[i, 0] = np.float64(reward[i]) + discount[i] * np.float64(target[i, 0])


@block_form(bootstrap_target_kernel, lambda reward, discount, target: reward.shape)
@cuda.jit(device=True)
def bootstrap_target_block(reward, discount, target, rows):
    for i in range(cuda.threadIdx.x, rows, cuda.blockDim.x):
        target[i, 0] = np.float64(reward[i]) + discount[i] * np.float64(target[i, 0])


@api.bootstrap_target.dispatch
def bootstrap_target(device: CUDA, reward, discount, target):
    launch_1d(device, bootstrap_target_kernel, reward.shape[0], reward, discount, target)
