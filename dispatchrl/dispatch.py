"""Generic functions: a declaration that validates arguments, plus plum methods per device.

``@generic`` turns a declaration (the function's contract: it checks shapes, dtypes and devices
and returns the normalised positional arguments) into a :class:`GenericFunction`. Backends add
methods with ``@fn.dispatch`` exactly as with plum; the declaration runs before any of them, so
bad input is refused before any kernel runs, whichever device is asked for.
"""

import plum

from .errors import DeviceError

__all__ = ["generic", "GenericFunction", "GENERIC_FUNCTIONS"]

#: every public generic function, in declaration order (tests check each stays cache-friendly)
GENERIC_FUNCTIONS = []


class GenericFunction:
    def __init__(self, declaration):
        self.declaration = declaration
        self.function = plum.Function(declaration)
        self.__name__ = declaration.__name__
        self.__qualname__ = declaration.__qualname__
        self.__module__ = declaration.__module__
        self.__doc__ = declaration.__doc__
        self.__wrapped__ = declaration

    def dispatch(self, method=None, precedence=0):
        """Register a method (plum's ``Function.dispatch``): annotate the device argument."""
        return self.function.dispatch(method, precedence=precedence)

    def resolve(self, *args):
        """The plum method that ``self(*args)`` would run (after validation)."""
        args = self.declaration(*args)
        return self.function._resolve_method_with_cache(args=args)[0]

    def __call__(self, *args, **kwargs):
        args = self.declaration(*args, **kwargs)
        try:
            return self.function(*args)
        except plum.NotFoundLookupError:
            raise DeviceError(
                f"{self.__name__} has no method for device {args[0]!r}; register one with "
                f"@dispatchrl.{self.__name__}.dispatch"
            ) from None

    def __repr__(self):
        return f"<generic function {self.__name__} with {len(self.function.methods)} method(s)>"


def generic(declaration):
    """Declare a generic function; the decorated body validates and returns the argument tuple."""
    fn = GenericFunction(declaration)
    GENERIC_FUNCTIONS.append(fn)
    return fn
