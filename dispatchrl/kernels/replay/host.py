"""The host methods of the replay generic functions that Generic and CPU share: each launches its
device's kernel (:func:`~dispatchrl.kernels.lowering.kernels_for`: the Numba loop of ``cpu`` on a
CPU, the numpy reference of ``generic`` elsewhere); the functions whose kernels take the call's
arguments as declared get theirs from :func:`~dispatchrl.kernels.lowering.launch_as_declared`, at
the end."""

from types import ModuleType

from ...devices import Generic
from ...staging import launch
from ..lowering import kernels_for, launch_as_declared
from ..offpolicy.api import transition_arrays
from . import api, cpu, generic

__all__: list[str] = []  # methods only: importing the module registers them


def _kernels(device: Generic) -> ModuleType:
    return kernels_for(device, generic, cpu)


@api.replay_gather.dispatch
def replay_gather(device: Generic, buffer, index, batch):
    launch(device, _kernels(device).replay_gather_kernel, index, *transition_arrays(buffer), *transition_arrays(batch))


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


launch_as_declared(
    generic,
    cpu,
    api.priority_mark_new,
    api.scale_rows,
    api.td_priority,
    api.linear_anneal,
    api.uniform_index,
    api.bootstrap_target,
)
