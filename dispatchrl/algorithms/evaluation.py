"""Deprecated alias of :mod:`dispatchrl.training.evaluation` (moved there by issue 32; goes in the next
release): importing it warns and gives that module itself."""

import sys
import warnings

from ..training import evaluation

__all__: list[str] = []

warnings.warn(
    "dispatchrl.algorithms.evaluation moved to dispatchrl.training.evaluation; the old path goes in the next release",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = evaluation
