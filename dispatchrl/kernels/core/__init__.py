"""Core generic functions: dense layers, activations, matrix products, losses, Adam, Polyak
averaging, fill/copy/increment. Declarations in api, methods per backend; CUDA methods register
when a CUDA device is first made."""

from . import api, c, cpu, cpu_fork, generic, host  # noqa: F401  (importing registers the methods)
from .api import *  # noqa: F403

__all__ = list(api.__all__)
