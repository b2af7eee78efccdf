"""Dispatched functions: the one wrapper dispatchrl puts around a plum function.

Generic functions (the kernels' contracts, :mod:`.dispatch`), network functions
(:mod:`.nn.network`), the memory spaces' operations (:mod:`.memory`), an MLP's backward loop and
:func:`~dispatchrl.staging.compile_step` are each a :class:`DispatchedFunction`: ``fn.dispatch``
registers a method (annotate the argument it dispatches on), ``fn.function`` is the plum
function, and a call that no method matches raises the dispatchrl error ``missing`` builds,
which says how to add one.
"""

from collections.abc import Callable
from typing import Any

import plum

from .errors import DeviceError, DispatchRLError

__all__ = ["DispatchedFunction"]


class DispatchedFunction:
    """A plum function over ``declaration``'s parameters (its signature and docstring are the
    function's; ``name``, where given, replaces the declaration's). ``missing(args)`` builds the
    error for a call without a method (default: a :class:`~dispatchrl.errors.DeviceError` naming
    the argument types)."""

    #: what the repr calls it
    kind = "dispatched function"

    def __init__(
        self,
        declaration: Callable[..., Any],
        missing: Callable[[tuple], DispatchRLError] | None = None,
        name: str | None = None,
    ) -> None:
        self.declaration = declaration
        self.function = plum.Function(declaration)
        self.__name__ = name or declaration.__name__
        self.__qualname__ = declaration.__qualname__
        self.__module__ = declaration.__module__
        self.__doc__ = declaration.__doc__
        self.__wrapped__ = declaration
        self.missing = missing or self._no_method

    def dispatch(self, method: Callable[..., Any] | None = None, precedence: int = 0) -> Any:
        """Register a method (plum's ``Function.dispatch``), or ``@fn.dispatch(precedence=...)``."""
        return self.function.dispatch(method, precedence=precedence)

    def __call__(self, *args: Any) -> Any:
        try:
            return self.function(*args)
        except plum.NotFoundLookupError:
            self.refuse_unmatched(args)
            raise  # raised by a call inside the method, not by this one

    def refuse_unmatched(self, args: tuple) -> None:
        """Raise ``missing(args)`` if no method matches ``args``."""
        try:
            self.function.resolve_method(args)
        except plum.NotFoundLookupError:
            raise self.missing(args) from None

    def _no_method(self, args: tuple) -> DispatchRLError:
        types = ", ".join(type(a).__name__ for a in args)
        return DeviceError(
            f"{self.__name__} has no method for ({types}); register one with @{self.__module__}.{self.__name__}.dispatch"
        )

    def __repr__(self) -> str:
        return f"<{self.kind} {self.__name__} with {len(self.function.methods)} method(s)>"
