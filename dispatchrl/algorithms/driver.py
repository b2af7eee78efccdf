"""Deprecated alias of :mod:`dispatchrl.training.driver` (moved there by issue 32; goes in the next
release): importing it warns and gives that module itself."""

import sys
import warnings

from ..training import driver

__all__: list[str] = []

warnings.warn(
    "dispatchrl.algorithms.driver moved to dispatchrl.training.driver; the old path goes in the next release",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = driver
