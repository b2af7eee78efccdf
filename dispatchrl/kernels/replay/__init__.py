"""Replay generic functions of the composable buffer (dispatchrl.data.buffers): the prioritized
sum tree and min tree (mark new rows, update priorities, sample with importance weights) and the
row gather, importance weights on loss gradients, the twin critics' TD-error priorities and the
β schedule. Declarations in api, methods per backend; CUDA methods register when a CUDA device is
first made."""

from . import api, c, cpu, generic  # noqa: F401  (importing registers the methods)
from .api import (
    linear_anneal,
    priority_mark_new,
    priority_sample,
    priority_update,
    replay_gather,
    scale_rows,
    td_priority,
)

__all__ = [
    "linear_anneal",
    "priority_mark_new",
    "priority_sample",
    "priority_update",
    "replay_gather",
    "scale_rows",
    "td_priority",
]
