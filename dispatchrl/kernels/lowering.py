"""The host methods Generic and CPU share: a family's method is written once, for Generic, and
launches the kernel its device lowers to (CPU's Numba loop on a CPU, subclasses included; the
numpy reference on any other Generic device). The kernels themselves stay one per backend, in
the family's ``cpu`` and ``generic`` modules, under the same names."""

from collections.abc import Callable
from types import ModuleType
from typing import Any

from ..devices import CPU, Generic
from ..staging import launch

__all__ = ["KernelModules"]


class KernelModules:
    """A family's ``generic`` (numpy) and ``cpu`` (Numba) kernel modules; called with a device,
    the one holding its kernels."""

    def __init__(self, generic: ModuleType, cpu: ModuleType) -> None:
        self.generic, self.cpu = generic, cpu

    def __call__(self, device: Generic) -> ModuleType:
        return self.cpu if isinstance(device, CPU) else self.generic

    def launch_as_declared(self, *functions: Any) -> None:
        """Register, for each of the generic ``functions``, the Generic method that launches its
        device's ``<name>_kernel`` with the call's arguments as the declaration passed them: the
        host method of every function whose kernels take exactly its arguments, written once."""
        for function in functions:
            name = f"{function.__name__}_kernel"
            function.dispatch(_launcher(getattr(self.generic, name), getattr(self.cpu, name)))


def _launcher(reference: Callable, compiled: Callable) -> Callable:
    def method(device: Generic, *args) -> Any:  # Any: plum keeps caching the call (see dispatch)
        launch(device, compiled if isinstance(device, CPU) else reference, *args)

    return method
