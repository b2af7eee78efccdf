"""Device tags: plain values passed first to every generic function, as in RLtools.

The class hierarchy is the fallback order plum uses: a method for ``Generic`` serves ``CPU``
(and any device derived from it) unless a more specific method exists.

    Device
    ├── Generic      pure numpy reference, always available
    │   └── CPU      Numba-jitted kernels, BLAS for matrix products
    ├── CUDA         numba.cuda kernels, data in GPU memory
    └── C            generated C99 compiled by the host compiler
"""

import importlib
from typing import Any

from ..errors import DeviceError

__all__ = ["CPU", "CUDA", "C", "Device", "Generic"]


class Device:
    """Abstract device tag. Instances are interchangeable values: ``CPU() == CPU()``."""

    #: where arrays of this device live: "host" (numpy) or "cuda" (GPU memory)
    memory = "host"

    def __init__(self):
        if type(self) is Device:
            raise DeviceError("Device is abstract: use Generic(), CPU(), CUDA() or C()")

    def __eq__(self, other) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Generic(Device):
    """Pure numpy reference implementation of every generic function."""


class CPU(Generic):
    """Numba-jitted CPU kernels; falls back to Generic where no CPU method exists."""


class CUDA(Device):
    """numba.cuda kernels on an NVIDIA GPU (or the CUDA simulator, NUMBA_ENABLE_CUDASIM=1)."""

    memory = "cuda"
    #: the CUDA runtime and the modules holding CUDA methods, imported (so registered) when a CUDA
    #: device is first made: importing numba.cuda is slow, and CPU-only users should not pay for it.
    #: The one place dispatchrl names modules by string; a backend added outside dispatchrl appends.
    method_modules = [
        "dispatchrl.backends.cuda",
        "dispatchrl.memory.cuda",
        "dispatchrl.kernels.core.cuda",
        "dispatchrl.kernels.random.cuda",
        "dispatchrl.kernels.offpolicy.cuda",
        "dispatchrl.kernels.onpolicy.cuda",
        "dispatchrl.kernels.replay.cuda",
        "dispatchrl.envs.cuda",
    ]

    def __init__(self):
        cuda = _import_numba_cuda()
        if not cuda.is_available():
            raise DeviceError(
                "CUDA device requested but no usable NVIDIA GPU/driver was found; "
                "use the CPU device (drl.CPU(); on the command line --device cpu), or set "
                "NUMBA_ENABLE_CUDASIM=1 to run CUDA kernels in the simulator"
            )
        for module in self.method_modules:
            importlib.import_module(module)


def _import_numba_cuda() -> Any:
    """``numba.cuda``, or a DeviceError naming the versions when this combination cannot import it
    (numba-cuda up to 0.30 registers ``np.row_stack``, which numpy 2.5 removed)."""
    try:
        from numba import cuda
    except (ImportError, AttributeError) as e:
        from importlib.metadata import PackageNotFoundError, version

        def installed(name) -> str:
            try:
                return version(name)
            except PackageNotFoundError:
                return "not installed"

        raise DeviceError(
            f"numba.cuda does not import here ({type(e).__name__}: {e}) with numba {installed('numba')}, "
            f"numba-cuda {installed('numba-cuda')}, numpy {installed('numpy')}; install a working combination "
            "with pip install 'dispatchrl[cuda]' (CUDA 12; 'dispatchrl[cuda13]' for CUDA 13), which pins "
            "numpy below 2.5"
        ) from e
    return cuda


class C(Device):
    """Generated C99 kernels compiled by the host C compiler."""


def device_from_name(name) -> Device:
    """``"cpu"`` → ``CPU()`` etc., for command lines and configs."""
    names = {"generic": Generic, "cpu": CPU, "cuda": CUDA, "c": C}
    try:
        return names[name.lower()]()
    except KeyError:
        raise DeviceError(f"unknown device {name!r}; expected one of {sorted(names)}") from None
