"""The host methods Generic and CPU share: a family's method is written once, for Generic, and
launches the kernel its device lowers to (CPU's Numba loop on a CPU, subclasses included; the
numpy reference on any other Generic device). The kernels themselves stay one per backend, in
the family's ``cpu`` and ``generic`` modules, under the same names."""

from types import ModuleType

from ..devices import CPU, Generic

__all__ = ["kernels_for"]


def kernels_for(device: Generic, generic: ModuleType, cpu: ModuleType) -> ModuleType:
    """The module holding ``device``'s kernels: ``cpu`` for a CPU device, else ``generic``."""
    return cpu if isinstance(device, CPU) else generic
