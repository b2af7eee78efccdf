"""Numba helpers the envs' CPU per-env bodies share; ``shared/cuda.py`` compiles them as CUDA
device functions from the same source."""

from numba import njit

from ...backends.cpu import JIT_EXACT

__all__ = ["clear_reset_at"]


@njit(**JIT_EXACT)
def clear_reset_at(i, steps, reward, terminated, truncated, only_done):
    """Zero env i's step counter; a full reset also clears its reward and flags."""
    steps[i] = 0
    if not only_done:
        reward[i] = 0.0
        terminated[i] = False
        truncated[i] = False
