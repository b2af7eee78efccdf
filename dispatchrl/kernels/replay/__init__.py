"""Replay generic functions of the composable buffer (dispatchrl.data.buffers): the prioritized
sum tree and min tree (mark new rows, update priorities, sample with importance weights) and the
row gather, importance weights on loss gradients, the twin critics' TD-error priorities and the
β schedule; n-step windows over the fused steps' ring (uniform rows, the window's return and
bootstrap, the per-row discounted target). Declarations in api, methods per backend; CUDA methods register when a CUDA device is
first made."""

from . import api, c, cpu, generic, host  # noqa: F401  (importing registers the methods)
from .api import *  # noqa: F403

__all__ = list(api.__all__)
