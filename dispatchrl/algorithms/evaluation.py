"""Deprecated alias of :mod:`dispatchrl.training.evaluation` (moved there by issue 32; goes in the next
release): importing it warns and gives that module itself."""

from ..training import evaluation
from .moved import alias

__all__: list[str] = []
alias(__name__, evaluation)
