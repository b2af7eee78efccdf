"""CPU (Numba) methods of the replay generic functions (row by row, in order, as generic.py)."""

import numpy as np
from numba import njit

from ...backends.cpu import JIT_EXACT
from ...devices import CPU
from ...staging import launch
from ..offpolicy.api import transition_arrays
from ..random.cpu import uniform01
from . import api

__all__ = [
    "checked_priority_update_kernel",
    "gather_rows_kernel",
    "n_step_row",
    "set_leaf",
    "tree_descend",
    "uniform_rows_kernel",
]


@njit(**JIT_EXACT)
def set_leaf(sum_tree, min_tree, row, value):
    node = sum_tree.shape[0] // 2 + row
    sum_tree[node] = value
    min_tree[node] = value
    node //= 2
    while node >= 1:
        sum_tree[node] = sum_tree[2 * node] + sum_tree[2 * node + 1]
        a, b = min_tree[2 * node], min_tree[2 * node + 1]
        min_tree[node] = a if a <= b else b
        node //= 2


@njit(**JIT_EXACT)
def tree_descend(sum_tree, mass):
    """The leaf (row) whose cumulative interval holds ``mass``."""
    leaves = sum_tree.shape[0] // 2
    node = 1
    while node < leaves:
        left = sum_tree[2 * node]
        if mass >= left:
            mass -= left
            node = 2 * node + 1
        else:
            node = 2 * node
    return node - leaves


@njit(**JIT_EXACT)
def priority_mark_new_kernel(sum_tree, min_tree, max_priority, position, count, capacity, alpha, eps):
    value = (max_priority[0] + eps) ** alpha
    for i in range(count):
        set_leaf(sum_tree, min_tree, (position[0] + i) % capacity, value)


@api.priority_mark_new.dispatch
def priority_mark_new(device: CPU, sum_tree, min_tree, max_priority, position, count, capacity, alpha, eps):
    launch(device, priority_mark_new_kernel, sum_tree, min_tree, max_priority, position, count, capacity, alpha, eps)


@njit(**JIT_EXACT)
def priority_update_kernel(sum_tree, min_tree, max_priority, index, priority, alpha, eps):
    for i in range(index.shape[0]):
        p = abs(np.float64(priority[i]))
        if p > max_priority[0]:
            max_priority[0] = p
        set_leaf(sum_tree, min_tree, index[i], (p + eps) ** alpha)


@api.priority_update.dispatch
def priority_update(device: CPU, sum_tree, min_tree, max_priority, index, priority, alpha, eps):
    launch(device, priority_update_kernel, sum_tree, min_tree, max_priority, index, priority, alpha, eps)


@njit(**JIT_EXACT)
def priority_sample_kernel(rng, sum_tree, min_tree, size, beta, index, weight):
    leaves = sum_tree.shape[0] // 2
    key, base = rng[0], rng[1]
    total = sum_tree[1]
    p_min = min_tree[1]
    last = size[0] - 1
    for k in range(index.shape[0]):
        row = tree_descend(sum_tree, uniform01(key, base + np.uint64(k)) * total)
        if row > last:
            row = last
        index[k] = row
        weight[k] = (sum_tree[leaves + row] / p_min) ** -beta[0]
    rng[1] = base + np.uint64(index.shape[0])


@api.priority_sample.dispatch
def priority_sample(device: CPU, rng, sum_tree, min_tree, size, beta, index, weight):
    launch(device, priority_sample_kernel, rng, sum_tree, min_tree, size, beta, index, weight)


@njit(**JIT_EXACT)
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
    for k in range(index.shape[0]):
        row = index[k]
        for j in range(obs.shape[1]):
            obs[k, j] = b_obs[row, j]
            next_obs[k, j] = b_next_obs[row, j]
        for j in range(action.shape[1]):
            action[k, j] = b_action[row, j]
        reward[k] = b_reward[row]
        terminated[k] = b_terminated[row]
        truncated[k] = b_truncated[row]


@api.replay_gather.dispatch
def replay_gather(device: CPU, buffer, index, batch):
    launch(device, replay_gather_kernel, index, *transition_arrays(buffer), *transition_arrays(batch))


@njit(**JIT_EXACT)
def scale_rows_kernel(weight, x):
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            x[i, j] *= weight[i]


@api.scale_rows.dispatch
def scale_rows(device: CPU, weight, x):
    launch(device, scale_rows_kernel, weight, x)


@njit(**JIT_EXACT)
def td_priority_kernel(q1, q2, target, priority):
    for i in range(priority.shape[0]):
        # the sum in the arrays' precision; halving is exact in any precision
        priority[i] = (abs(q1[i, 0] - target[i, 0]) + abs(q2[i, 0] - target[i, 0])) * 0.5


@api.td_priority.dispatch
def td_priority(device: CPU, q1, q2, target, priority):
    launch(device, td_priority_kernel, q1, q2, target, priority)


@njit(**JIT_EXACT)
def linear_anneal_kernel(step, start, end, steps, out):
    out[0] = start + (end - start) * min(1.0, np.float64(step[0]) / steps)


@api.linear_anneal.dispatch
def linear_anneal(device: CPU, step, start, end, steps, out):
    launch(device, linear_anneal_kernel, step, start, end, steps, out)


@njit(**JIT_EXACT)
def uniform_index_kernel(rng, size, index):
    key, base = rng[0], rng[1]
    filled = size[0]
    for k in range(index.shape[0]):
        index[k] = np.int64(uniform01(key, base + np.uint64(k)) * filled)
    rng[1] = base + np.uint64(index.shape[0])


@api.uniform_index.dispatch
def uniform_index(device: CPU, rng, size, index):
    launch(device, uniform_index_kernel, rng, size, index)


@njit(**JIT_EXACT)
def n_step_row(k, index, b_reward, b_terminated, b_truncated, position, num_envs, n, gamma, reward, discount):
    """Row k's window: writes reward[k] and discount[k], returns the window's last row."""
    capacity = b_reward.shape[0]
    newest = (position[0] - 1 + capacity) % capacity
    row = index[k]
    total = 0.0
    scale = 1.0
    for j in range(n):
        total += scale * np.float64(b_reward[row])
        scale *= gamma
        # the window ends after n transitions, at an episode's end, or at the env's newest one
        if j == n - 1 or b_terminated[row] or b_truncated[row] or (newest - row + capacity) % capacity < num_envs:
            break
        row = (row + num_envs) % capacity
    reward[k] = total
    discount[k] = scale
    return row


@njit(**JIT_EXACT)
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
    for k in range(index.shape[0]):
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


@api.n_step_gather.dispatch
def n_step_gather(device: CPU, buffer, index, num_envs, n, gamma, batch, discount):
    launch(
        device,
        n_step_gather_kernel,
        index,
        *transition_arrays(buffer),
        buffer.position,
        num_envs,
        n,
        gamma,
        *transition_arrays(batch),
        discount,
    )


@njit(**JIT_EXACT)
def bootstrap_target_kernel(reward, discount, target):
    for i in range(reward.shape[0]):
        target[i, 0] = np.float64(reward[i]) + discount[i] * np.float64(target[i, 0])


@api.bootstrap_target.dispatch
def bootstrap_target(device: CPU, reward, discount, target):
    launch(device, bootstrap_target_kernel, reward, discount, target)


@njit(**JIT_EXACT)
def uniform_rows_kernel(rng, length, sources, outputs, index):
    """The host ReplayBuffer's prepared uniform sample: ``index`` drawn as :func:`uniform_index`
    (the stream's next B positions), then rows ``index`` of every source copied into the output
    at the same place (leaves seen as (rows, bytes) uint8 views, so one compiled loop serves any
    mix of dtypes and shapes)."""
    key, base = rng[0], rng[1]
    for k in range(index.shape[0]):
        index[k] = np.int64(uniform01(key, base + np.uint64(k)) * length)
    rng[1] = base + np.uint64(index.shape[0])
    for s in range(len(sources)):
        source, output = sources[s], outputs[s]
        for k in range(index.shape[0]):
            row = index[k]
            for j in range(source.shape[1]):
                output[k, j] = source[row, j]


@njit(**JIT_EXACT)
def gather_rows_kernel(index, sources, outputs):
    """Rows ``index`` of every source into its output (the prepared prioritized sample)."""
    for s in range(len(sources)):
        source, output = sources[s], outputs[s]
        for k in range(index.shape[0]):
            row = index[k]
            for j in range(source.shape[1]):
                output[k, j] = source[row, j]


@njit(**JIT_EXACT)
def checked_priority_update_kernel(sum_tree, min_tree, max_priority, index, priority, alpha, eps):
    """priority_update_kernel after checking every priority is finite and >= 0; False (nothing
    written) otherwise: the prepared sampler's update, one compiled call with its check."""
    for i in range(priority.shape[0]):
        p = priority[i]
        if not (p >= 0.0 and p < np.inf):
            return False
    priority_update_kernel(sum_tree, min_tree, max_priority, index, priority, alpha, eps)
    return True
