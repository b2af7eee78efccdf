"""Core host methods shared by Generic and CPU (see :mod:`dispatchrl.kernels.lowering`)."""

from ...arrays import Array
from ...devices import Generic
from ...staging import launch
from ..lowering import KernelModules
from . import api, cpu, generic

__all__: list[str] = []  # methods only: importing the module registers them

_kernels = KernelModules(generic, cpu)
_kernels.launch_as_declared(
    api.accumulate_squared_norm,
    api.argmax,
    api.clip,
    api.clip_by_norm,
    api.copy,
    api.fill,
    api.increment,
    api.linear_schedule,
    api.mse_gradient,
    api.mse_loss,
    api.nonfinite_flag,
    api.polyak_update,
    api.weight_decay_step,
)


@api.adam_step.dispatch
def adam_step(device: Generic, param, grad, m, v, t, lr, beta1, beta2, eps):
    launch(device, _kernels(device).adam_step_kernel, param, grad, m, v, t, lr, beta1, beta2, eps)


@api.adam_step.dispatch
def adam_step(device: Generic, param, grad, m, v, t, lr: Array, beta1, beta2, eps):
    launch(device, _kernels(device).adam_step_lr_array_kernel, param, grad, m, v, t, lr, beta1, beta2, eps)
