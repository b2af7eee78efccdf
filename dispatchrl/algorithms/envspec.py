"""Deprecated alias of :mod:`dispatchrl.training.envspec` (moved there by issue 32; goes in the next
release): importing it warns and gives that module itself."""

from ..training import envspec
from .moved import alias

__all__: list[str] = []
alias(__name__, envspec)
