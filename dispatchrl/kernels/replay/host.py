"""The host methods of the replay generic functions that Generic and CPU share: each launches
its device's kernel (:func:`~dispatchrl.kernels.lowering.kernels_for`: the Numba loop of ``cpu``
on a CPU, the numpy reference of ``generic`` elsewhere)."""

from types import ModuleType

from ...devices import Generic
from ...staging import launch
from ..lowering import kernels_for
from ..offpolicy.api import transition_arrays
from . import api, cpu, generic

__all__: list[str] = []  # methods only: importing the module registers them


def _kernels(device: Generic) -> ModuleType:
    return kernels_for(device, generic, cpu)


@api.priority_mark_new.dispatch
def priority_mark_new(device: Generic, sum_tree, min_tree, max_priority, position, count, capacity, alpha, eps):
    launch(
        device,
        _kernels(device).priority_mark_new_kernel,
        sum_tree,
        min_tree,
        max_priority,
        position,
        count,
        capacity,
        alpha,
        eps,
    )


@api.replay_gather.dispatch
def replay_gather(device: Generic, buffer, index, batch):
    launch(device, _kernels(device).replay_gather_kernel, index, *transition_arrays(buffer), *transition_arrays(batch))


@api.scale_rows.dispatch
def scale_rows(device: Generic, weight, x):
    launch(device, _kernels(device).scale_rows_kernel, weight, x)


@api.td_priority.dispatch
def td_priority(device: Generic, q1, q2, target, priority):
    launch(device, _kernels(device).td_priority_kernel, q1, q2, target, priority)


@api.linear_anneal.dispatch
def linear_anneal(device: Generic, step, start, end, steps, out):
    launch(device, _kernels(device).linear_anneal_kernel, step, start, end, steps, out)


@api.uniform_index.dispatch
def uniform_index(device: Generic, rng, size, index):
    launch(device, _kernels(device).uniform_index_kernel, rng, size, index)


@api.n_step_gather.dispatch
def n_step_gather(device: Generic, buffer, index, num_envs, n, gamma, batch, discount):
    launch(
        device,
        _kernels(device).n_step_gather_kernel,
        index,
        *transition_arrays(buffer),
        buffer.position,
        num_envs,
        n,
        gamma,
        *transition_arrays(batch),
        discount,
    )


@api.bootstrap_target.dispatch
def bootstrap_target(device: Generic, reward, discount, target):
    launch(device, _kernels(device).bootstrap_target_kernel, reward, discount, target)
