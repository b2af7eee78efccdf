"""Kernels: generic-function declarations (api) and one module of methods per backend.
The CUDA methods register when a CUDA device is first created (importing numba.cuda is slow)."""

from . import api, generic, cpu, rl  # noqa: F401  (importing registers the methods)
from . import c  # noqa: F401  (C methods; compiling is lazy, needs no compiler at import)
