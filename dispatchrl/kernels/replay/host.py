"""Replay host methods shared by Generic and CPU (see :mod:`dispatchrl.kernels.lowering`)."""

from ...devices import Generic
from ...staging import launch
from ..lowering import KernelModules
from ..offpolicy.api import transition_arrays
from . import api, cpu, generic

__all__: list[str] = []  # methods only: importing the module registers them


_kernels = KernelModules(generic, cpu)


@api.replay_gather.dispatch
def replay_gather(device: Generic, buffer, index, batch):
    launch(device, _kernels(device).replay_gather_kernel, index, *transition_arrays(buffer), *transition_arrays(batch))


@api.n_step_gather.dispatch
def n_step_gather(device: Generic, buffer, index, num_envs, n, gamma, batch, discount):
    arguments = api.n_step_gather_arguments(buffer, index, num_envs, n, gamma, batch, discount)
    launch(device, _kernels(device).n_step_gather_kernel, *arguments)


_kernels.launch_as_declared(
    api.priority_mark_new,
    api.scale_rows,
    api.td_priority,
    api.linear_anneal,
    api.uniform_index,
    api.bootstrap_target,
)
