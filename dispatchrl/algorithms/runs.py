"""Deprecated alias of :mod:`dispatchrl.training.runs` (moved there by issue 32; goes in the next
release): importing it warns and gives that module itself."""

import sys
import warnings

from ..training import runs

__all__: list[str] = []

warnings.warn(
    "dispatchrl.algorithms.runs moved to dispatchrl.training.runs; the old path goes in the next release",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = runs
