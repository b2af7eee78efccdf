"""Deprecated alias of :mod:`dispatchrl.training.envspec` (moved there by issue 32; goes in the next
release): importing it warns and gives that module itself."""

import sys
import warnings

from ..training import envspec

__all__: list[str] = []

warnings.warn(
    "dispatchrl.algorithms.envspec moved to dispatchrl.training.envspec; the old path goes in the next release",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = envspec
