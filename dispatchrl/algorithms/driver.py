"""Deprecated alias of :mod:`dispatchrl.training.driver` (moved there by issue 32; goes in the next
release): importing it warns and gives that module itself."""

from ..training import driver
from .moved import alias

__all__: list[str] = []
alias(__name__, driver)
