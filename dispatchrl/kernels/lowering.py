"""The host methods Generic and CPU share: a family's method is written once, for Generic, and
launches the kernel its device lowers to (CPU's Numba loop on a CPU, subclasses included; the
numpy reference on any other Generic device). The kernels themselves stay one per backend, in
the family's ``cpu`` and ``generic`` modules, under the same names."""

from collections.abc import Callable
from types import ModuleType
from typing import Any

from ..devices import CPU, Generic
from ..staging import launch

__all__ = ["kernels_for", "launch_as_declared"]


def kernels_for(device: Generic, generic: ModuleType, cpu: ModuleType) -> ModuleType:
    """The module holding ``device``'s kernels: ``cpu`` for a CPU device, else ``generic``."""
    return cpu if isinstance(device, CPU) else generic


def launch_as_declared(generic: ModuleType, cpu: ModuleType, *functions: Any) -> None:
    """Register, for each of the generic ``functions``, the Generic method that launches its
    device's ``<name>_kernel`` (of ``cpu`` on a CPU, else of ``generic``) with the call's arguments
    as its declaration passed them: the host method of every function whose kernels take exactly
    its arguments, written once instead of once per function and backend."""
    for function in functions:
        function.dispatch(
            _launcher(getattr(generic, f"{function.__name__}_kernel"), getattr(cpu, f"{function.__name__}_kernel"))
        )


def _launcher(reference: Callable, compiled: Callable) -> Callable:
    def method(device: Generic, *args) -> Any:  # Any: plum keeps caching the call (see dispatch)
        launch(device, compiled if isinstance(device, CPU) else reference, *args)

    return method
