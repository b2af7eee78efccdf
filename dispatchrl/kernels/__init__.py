"""Kernels: generic-function families, each a package of declarations (``api``) and one module
of methods per backend (``generic``, ``cpu``, ``cuda``, ``c``; where Generic's and CPU's methods
differ only in the kernel they launch, one shared method in ``host``, see :mod:`.lowering`):

- :mod:`.core`: dense layers, activations, matmul, losses, Adam, Polyak, fill/copy/increment;
- :mod:`.random`: the counter-based random stream;
- :mod:`.offpolicy`: replay, exploration noise, TD targets, episode log, SAC's Gaussian head;
- :mod:`.onpolicy`: GAE, returns, observation statistics, PPO's Gaussian policy gradient.
- :mod:`.replay`: prioritized replay sum/min trees and the row gather of the composable buffer.

The CUDA modules register when a CUDA device is first made (``CUDA.method_modules``: importing
numba.cuda is slow)."""

from . import core, offpolicy, onpolicy, random, replay

__all__ = ["core", "offpolicy", "onpolicy", "random", "replay"]
