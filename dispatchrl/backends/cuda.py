"""The CUDA runtime: launch configurations, device twins of CPU helpers, ``compile_step(CUDA)``.

Imported only when a CUDA device is first made (``CUDA.method_modules``): importing numba.cuda is
slow and CPU-only users should not pay for it. This lazy, string-named import is the one
exception to plain imports in dispatchrl. Kernels stay within the subset real numba.cuda compiles
(the simulator would accept more)."""

import types

from numba import cuda
from numba.core.registry import CPUDispatcher

from ..arrays import Array
from ..devices import CUDA
from ..staging import Program, compile_step, launch, python_program

__all__ = [
    "BLOCK_1D",
    "BLOCK_2D",
    "REDUCE_THREADS",
    "Launch",
    "device_twin",
    "flat",
    "grid_1d",
    "grid_2d",
    "launch_1d",
    "launch_2d",
]

BLOCK_1D = 128
BLOCK_2D = (16, 8)
REDUCE_THREADS = 128  # one block reduces a whole array (shared memory tree)


def device_twin(cpu_function, **callees):
    """The CPU ``@njit`` helper ``cpu_function`` compiled as a CUDA device function from the same
    Python source, so the backends evaluate identical expressions and cannot drift. ``callees``
    rebinds the jitted helpers it calls to their device twins; a CPU-jitted callee left unbound is
    refused here, because real CUDA cannot call it and the simulator would not notice."""
    py = cpu_function.py_func
    scope = {**py.__globals__, **callees}
    stray = sorted(name for name in py.__code__.co_names if isinstance(scope.get(name), CPUDispatcher))
    if stray:
        raise TypeError(
            f"device_twin({py.__name__}): it calls CPU-jitted {', '.join(stray)}; "
            "pass their device twins as keyword arguments"
        )
    return cuda.jit(device=True)(types.FunctionType(py.__code__, scope, py.__name__, py.__defaults__, py.__closure__))


def grid_1d(n: int) -> tuple:
    return ((n + BLOCK_1D - 1) // BLOCK_1D,), (BLOCK_1D,)


def grid_2d(m: int, n: int) -> tuple:
    bx, by = BLOCK_2D
    return ((m + bx - 1) // bx, (n + by - 1) // by), BLOCK_2D


class Launch:
    """``kernel[grid, block]`` applied at call time: the CUDA simulator's ``kernel[...]`` mutates
    and returns the kernel itself, so a configured kernel cannot be kept for later."""

    __slots__ = ("block", "grid", "kernel")

    def __init__(self, kernel, grid, block):
        self.kernel, self.grid, self.block = kernel, grid, block

    def __call__(self, *args) -> None:
        self.kernel[self.grid, self.block](*args)


def launch_1d(device: CUDA, kernel, n: int, *args) -> None:
    launch(device, Launch(kernel, *grid_1d(n)), *args)


def launch_2d(device: CUDA, kernel, shape: tuple, *args) -> None:
    launch(device, Launch(kernel, *grid_2d(*shape)), *args)


def flat(a: Array):
    """1-D view of an Array's device buffer, for elementwise kernels."""
    return a.data.reshape(a.size)


@compile_step.dispatch
def compile_step(device: CUDA, calls: list) -> Program:
    # A prepared loop of launches on device-resident arrays (one fused kernel is the design target)
    return python_program(calls)
