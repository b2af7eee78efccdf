"""Deprecated alias of :mod:`dispatchrl.training.callbacks` (moved there by issue 32; goes in the next
release): importing it warns and gives that module itself."""

import sys
import warnings

from ..training import callbacks

__all__: list[str] = []

warnings.warn(
    "dispatchrl.algorithms.callbacks moved to dispatchrl.training.callbacks; the old path goes in the next release",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = callbacks
