"""Core host methods shared by Generic and CPU (see :mod:`dispatchrl.kernels.lowering`)."""

from ..lowering import KernelModules
from . import api, cpu, generic

__all__: list[str] = []  # methods only: importing the module registers them

KernelModules(generic, cpu).launch_as_declared(
    api.accumulate_squared_norm, api.argmax, api.clip, api.clip_by_norm, api.linear_schedule
)
