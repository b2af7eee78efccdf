"""Deprecated alias of :mod:`dispatchrl.training.progress` (moved there by issue 32; goes in the next
release): importing it warns and gives that module itself."""

import sys
import warnings

from ..training import progress

__all__: list[str] = []

warnings.warn(
    "dispatchrl.algorithms.progress moved to dispatchrl.training.progress; the old path goes in the next release",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = progress
