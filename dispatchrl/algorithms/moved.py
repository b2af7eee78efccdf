"""The deprecated aliases of the modules issue 32 moved to :mod:`dispatchrl.training` (they go in
the next release)."""

import sys
import warnings
from types import ModuleType

__all__ = ["alias"]


def alias(old: str, module: ModuleType) -> None:
    """Make the module being imported as ``old`` ``module`` itself, with a DeprecationWarning."""
    warnings.warn(
        f"{old} moved to {module.__name__}; the old path goes in the next release", DeprecationWarning, stacklevel=3
    )
    sys.modules[old] = module
