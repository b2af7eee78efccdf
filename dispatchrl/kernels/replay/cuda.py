"""CUDA methods of the replay generic functions, their kernels generated from the CPU bodies
(:func:`per_index`, :func:`once`). Tree writes run in one thread (rows in order, as on every other
device: a repeated index keeps its last value); draws and gathers run one thread per row."""

import numpy as np
from numba import cuda

from ...backends.cuda import Launch, device_twin, launch_1d, launch_2d, launch_once, once, per_index
from ...devices import CUDA
from ...staging import launch
from ..core.cuda import increment_kernel
from ..offpolicy.api import TRANSITION_RECORDS, transition_arrays
from ..random.cuda import uniform01
from . import api, cpu

__all__ = ["copy_transition"]


@cuda.jit(device=True)
def select_float(condition, if_true, if_false):
    """cpu.select_float's value (there an intrinsic that keeps a CPU select branch-free)."""
    return if_true if condition else if_false


set_leaf = device_twin(cpu.set_leaf, select_float=select_float)
tree_descend = device_twin(cpu.tree_descend, select_float=select_float)
n_step_row = device_twin(cpu.n_step_row)
copy_transition = device_twin(cpu.copy_transition)
twins = {"set_leaf": set_leaf, "tree_descend": tree_descend, "uniform01": uniform01, "n_step_row": n_step_row}
# tree writes in one thread, in row order, as on every device
priority_mark_new_kernel = once(cpu.priority_mark_new_kernel, **twins)
priority_update_kernel = once(cpu.priority_update_kernel, **twins)
priority_sample_kernel = per_index(cpu.priority_sample_at, "index.shape[0]", **twins)
replay_gather_kernel = per_index(
    cpu.replay_gather_at, "index.shape[0]", fields=TRANSITION_RECORDS, copy_transition=copy_transition
)
scale_rows_kernel = per_index(cpu.scale_rows_at, "x.shape[0]", "x.shape[1]")
td_priority_kernel = per_index(cpu.td_priority_at, "priority.shape[0]")
linear_anneal_kernel = once(cpu.linear_anneal_kernel)
uniform_index_kernel = per_index(cpu.uniform_index_at, "index.shape[0]", **twins)
n_step_gather_kernel = per_index(cpu.n_step_gather_at, "index.shape[0]", fields=TRANSITION_RECORDS, **twins)
bootstrap_target_kernel = per_index(cpu.bootstrap_target_at, "reward.shape[0]")


@api.priority_mark_new.dispatch
def priority_mark_new(device: CUDA, sum_tree, min_tree, max_priority, position, count, capacity, alpha, eps):
    launch_once(
        device, priority_mark_new_kernel, sum_tree, min_tree, max_priority, position, count, capacity, alpha, eps
    )


@api.priority_update.dispatch
def priority_update(device: CUDA, sum_tree, min_tree, max_priority, index, priority, alpha, eps):
    launch_once(device, priority_update_kernel, sum_tree, min_tree, max_priority, index, priority, alpha, eps)


@api.priority_sample.dispatch
def priority_sample(device: CUDA, rng, sum_tree, min_tree, size, beta, index, weight):
    rows = index.shape[0]
    launch_1d(device, priority_sample_kernel, rows, rng, sum_tree, min_tree, size, beta, index, weight)
    launch(device, Launch(increment_kernel, (1,), (1,)), rng, 1, np.uint64(rows))


@api.replay_gather.dispatch
def replay_gather(device: CUDA, buffer, index, batch):
    launch_1d(
        device, replay_gather_kernel, index.shape[0], index, *transition_arrays(buffer), *transition_arrays(batch)
    )


@api.scale_rows.dispatch
def scale_rows(device: CUDA, weight, x):
    launch_2d(device, scale_rows_kernel, x.shape, weight, x)


@api.td_priority.dispatch
def td_priority(device: CUDA, q1, q2, target, priority):
    launch_1d(device, td_priority_kernel, priority.shape[0], q1, q2, target, priority)


@api.linear_anneal.dispatch
def linear_anneal(device: CUDA, step, start, end, steps, out):
    launch_once(device, linear_anneal_kernel, step, start, end, steps, out)


@api.uniform_index.dispatch
def uniform_index(device: CUDA, rng, size, index):
    rows = index.shape[0]
    launch_1d(device, uniform_index_kernel, rows, rng, size, index)
    launch(device, Launch(increment_kernel, (1,), (1,)), rng, 1, np.uint64(rows))


@api.n_step_gather.dispatch
def n_step_gather(device: CUDA, buffer, index, num_envs, n, gamma, batch, discount):
    arguments = api.n_step_gather_arguments(buffer, index, num_envs, n, gamma, batch, discount)
    launch_1d(device, n_step_gather_kernel, index.shape[0], *arguments)


@api.bootstrap_target.dispatch
def bootstrap_target(device: CUDA, reward, discount, target):
    launch_1d(device, bootstrap_target_kernel, reward.shape[0], reward, discount, target)
