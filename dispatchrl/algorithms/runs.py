"""Deprecated alias of :mod:`dispatchrl.training.runs` (moved there by issue 32; goes in the next
release): importing it warns and gives that module itself."""

from ..training import runs
from .moved import alias

__all__: list[str] = []
alias(__name__, runs)
