"""Generic (numpy) methods of the replay generic functions: the reference, row by row in order."""

import numpy as np

from ...devices import Generic
from ...staging import launch
from ..random.generic import uniform01
from . import api

__all__: list[str] = []


def set_leaf(sum_tree, min_tree, row, value) -> None:
    leaves = sum_tree.shape[0] // 2
    node = leaves + row
    sum_tree[node] = value
    min_tree[node] = value
    node //= 2
    while node >= 1:
        sum_tree[node] = sum_tree[2 * node] + sum_tree[2 * node + 1]
        min_tree[node] = min(min_tree[2 * node], min_tree[2 * node + 1])
        node //= 2


def priority_mark_new_kernel(sum_tree, min_tree, max_priority, position, count, capacity, alpha, eps) -> None:
    value = (max_priority[0] + eps) ** alpha
    for i in range(count):
        set_leaf(sum_tree, min_tree, (position[0] + i) % capacity, value)


def priority_update_kernel(sum_tree, min_tree, max_priority, index, priority, alpha, eps) -> None:
    for i in range(index.shape[0]):
        p = abs(float(priority[i]))
        if p > max_priority[0]:
            max_priority[0] = p
        set_leaf(sum_tree, min_tree, index[i], (p + eps) ** alpha)


@api.priority_update.dispatch
def priority_update(device: Generic, sum_tree, min_tree, max_priority, index, priority, alpha, eps):
    launch(device, priority_update_kernel, sum_tree, min_tree, max_priority, index, priority, alpha, eps)


def priority_sample_kernel(rng, sum_tree, min_tree, size, beta, index, weight) -> None:
    leaves = sum_tree.shape[0] // 2
    total = sum_tree[1]
    p_min = min_tree[1]
    u = uniform01(rng, index.shape[0])
    for k in range(index.shape[0]):
        mass = u[k] * total
        node = 1
        while node < leaves:
            left = sum_tree[2 * node]
            if mass >= left:
                mass -= left
                node = 2 * node + 1
            else:
                node = 2 * node
        row = min(node - leaves, size[0] - 1)
        index[k] = row
        weight[k] = (sum_tree[leaves + row] / p_min) ** -beta[0]


@api.priority_sample.dispatch
def priority_sample(device: Generic, rng, sum_tree, min_tree, size, beta, index, weight):
    launch(device, priority_sample_kernel, rng, sum_tree, min_tree, size, beta, index, weight)


def replay_gather_kernel(index, *buffer_batch) -> None:
    # the buffer's six arrays, then the batch's, both in TRANSITION_FIELDS order (as the CPU kernel)
    for src, dst in zip(buffer_batch[:6], buffer_batch[6:]):
        dst[...] = src[index]


def scale_rows_kernel(weight, x) -> None:
    x *= weight[:, None]


def td_priority_kernel(q1, q2, target, priority) -> None:
    priority[:] = (np.abs(q1[:, 0] - target[:, 0]) + np.abs(q2[:, 0] - target[:, 0])) * priority.dtype.type(0.5)


def linear_anneal_kernel(step, start, end, steps, out) -> None:
    out[0] = start + (end - start) * min(1.0, float(step[0]) / steps)


def uniform_index_kernel(rng, size, index) -> None:
    index[:] = (uniform01(rng, index.shape[0]) * size[0]).astype(np.int64)


def n_step_gather_kernel(index, *arrays) -> None:
    # the ring's arrays, its position, num_envs, n, gamma, the batch's arrays, discount (as the CPU kernel)
    b_obs, b_action, b_reward, b_next_obs, b_terminated, b_truncated = arrays[:6]
    position, num_envs, n, gamma = arrays[6:10]
    obs, action, reward, next_obs, terminated, truncated, discount = arrays[10:]
    capacity = b_obs.shape[0]
    newest = (int(position[0]) - 1) % capacity
    for k in range(index.shape[0]):
        row = int(index[k])
        obs[k] = b_obs[row]
        action[k] = b_action[row]
        total, scale = 0.0, 1.0
        for j in range(n):
            total += scale * float(b_reward[row])
            scale *= gamma
            # the window ends after n transitions, at an episode's end, or at the env's newest one
            if j == n - 1 or b_terminated[row] or b_truncated[row] or (newest - row) % capacity < num_envs:
                break
            row = (row + num_envs) % capacity
        reward[k] = total
        next_obs[k] = b_next_obs[row]
        terminated[k] = b_terminated[row]
        truncated[k] = b_truncated[row]
        discount[k] = scale


def bootstrap_target_kernel(reward, discount, target) -> None:
    for i in range(reward.shape[0]):
        target[i, 0] = float(reward[i]) + discount[i] * float(target[i, 0])
