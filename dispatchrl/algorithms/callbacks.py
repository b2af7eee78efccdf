"""Deprecated alias of :mod:`dispatchrl.training.callbacks` (moved there by issue 32; goes in the next
release): importing it warns and gives that module itself."""

from ..training import callbacks
from .moved import alias

__all__: list[str] = []
alias(__name__, callbacks)
