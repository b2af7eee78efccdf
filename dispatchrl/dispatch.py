"""Generic functions: a declaration that validates arguments, plus plum methods per device.

``@generic`` turns a declaration (the function's contract: it checks shapes, dtypes and devices
and returns the normalised positional arguments) into a :class:`GenericFunction`. Backends add
methods with ``@fn.dispatch`` exactly as with plum; the declaration runs before any of them, so
bad input is refused before any kernel runs, whichever device is asked for.

The decorator also states what the function writes, so overlapping memory is refused too::

    @generic(outputs=("out",), may_alias={"out": ("x",)})
    def relu(device, x, out): ...

``outputs`` are written without being read, ``inplace`` are read and updated (Adam moments, a
replay buffer, an env state); both name parameters, or fields of struct parameters
(``"buffer.position"``; a struct named whole means every Array field). ``may_alias`` lists, per
written argument, the arguments it may *be* (same memory exactly: elementwise in-place use).
Any other overlap between a written Array and any other Array argument is a :class:`ShapeError`
naming both, raised before any kernel runs — eagerly and while :func:`dispatchrl.fuse` traces
(fused steps replay the traced calls and never re-run the check). A declaration without
``outputs``/``inplace`` is treated as writing every Array argument.
"""

import dataclasses
import inspect

import numpy as np
import plum

from .arrays import Array
from .errors import DeviceError, ShapeError

__all__ = ["generic", "GenericFunction", "GENERIC_FUNCTIONS", "check_aliasing"]

#: every public generic function, in declaration order (tests check each stays cache-friendly)
GENERIC_FUNCTIONS = []


class GenericFunction:
    def __init__(self, declaration, outputs=None, inplace=(), may_alias=None):
        self.declaration = declaration
        self.function = plum.Function(declaration)
        self.__name__ = declaration.__name__
        self.__qualname__ = declaration.__qualname__
        self.__module__ = declaration.__module__
        self.__doc__ = declaration.__doc__
        self.__wrapped__ = declaration
        self.parameters = tuple(inspect.signature(declaration).parameters)
        declared = outputs is not None or bool(inplace)
        #: written without being read / read and updated in place (None: undeclared, all written)
        self.outputs = tuple(outputs or ()) if declared else None
        self.inplace = tuple(inplace)
        #: written argument → the arguments it may be exactly (same memory)
        self.may_alias = {k: tuple(v) for k, v in (may_alias or {}).items()}
        written = (*self.outputs, *self.inplace) if declared else None
        for name in (*(written or ()), *self.may_alias, *(n for v in self.may_alias.values() for n in v)):
            if name.split(".")[0] not in self.parameters[1:]:
                raise TypeError(f"@generic {self.__name__}: {name!r} is not a parameter of the declaration")
        for name in self.may_alias:
            if written is not None and name not in written:
                raise TypeError(f"@generic {self.__name__}: may_alias key {name!r} is not an output")
        self._written = written
        self._allowed = frozenset((a, b) for a, bs in self.may_alias.items() for b in bs for a, b in ((a, b), (b, a)))

    def dispatch(self, method=None, precedence=0):
        """Register a method (plum's ``Function.dispatch``): annotate the device argument."""
        return self.function.dispatch(method, precedence=precedence)

    def resolve(self, *args):
        """The plum method that ``self(*args)`` would run (after validation)."""
        args = self.declaration(*args)
        check_aliasing(self, args)
        return self.function._resolve_method_with_cache(args=args)[0]

    def __call__(self, *args, **kwargs):
        args = self.declaration(*args, **kwargs)
        check_aliasing(self, args)
        try:
            return self.function(*args)
        except plum.NotFoundLookupError:
            raise DeviceError(
                f"{self.__name__} has no method for device {args[0]!r}; register one with "
                f"@dispatchrl.{self.__name__}.dispatch"
            ) from None

    def __repr__(self):
        return f"<generic function {self.__name__} with {len(self.function.methods)} method(s)>"


def generic(declaration=None, *, outputs=None, inplace=(), may_alias=None):
    """Declare a generic function; the decorated body validates and returns the argument tuple.
    Bare ``@generic`` or ``@generic(outputs=..., inplace=..., may_alias=...)`` (see the module)."""
    def decorate(declaration):
        fn = GenericFunction(declaration, outputs, inplace, may_alias)
        GENERIC_FUNCTIONS.append(fn)
        return fn

    return decorate if declaration is None else decorate(declaration)


# ---------------------------------------------------------------- aliasing

def _extent(array):
    """[start, end) byte addresses of an Array's (C-contiguous, so gap-free) memory, cached on
    the Array: its ``data`` never changes."""
    extent = array.__dict__.get("_extent")
    if extent is None:
        data = array.data
        if isinstance(data, np.ndarray):
            start = data.__array_interface__["data"][0]
        elif hasattr(data, "device_ctypes_pointer"):  # numba.cuda device array
            start = data.device_ctypes_pointer.value or 0
        else:  # the CUDA simulator's arrays wrap a numpy array
            start = data._ary.__array_interface__["data"][0]
        extent = array._extent = (start, start + data.nbytes)
    return extent


def _struct_fields(value):
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        # fields marked checkpoint=False hold storage other fields are views of (nn.MLP.groups)
        return [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value)
                if f.metadata.get("checkpoint", True)]
    if hasattr(value, "__dict__") and not isinstance(value, type):
        return list(vars(value).items())
    return ()


def _collect(name, value, written, out, depth=0):
    """Append (path, Array, is written) for the Array leaves of a struct argument."""
    if isinstance(value, Array):
        out.append((name, value, written is None or _is_written(name, written)))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _collect(f"{name}.{i}", item, written, out, depth)
    elif depth < 4 and not isinstance(value, (str, bytes, int, float, np.generic, type(None))):
        for field, item in _struct_fields(value):
            _collect(f"{name}.{field}", item, written, out, depth + 1)


def _is_written(name, written):
    return any(name == w or name.startswith(w + ".") for w in written)


def check_aliasing(fn, args):
    """Refuse (ShapeError) any overlap between a written Array of ``args`` (a call's normalised
    arguments) and another Array argument, except the exact aliases ``fn.may_alias`` allows."""
    written = fn._written
    arrays = []
    for name, value in zip(fn.parameters[1:], args[1:]):
        if isinstance(value, Array):
            arrays.append((name, value, written is None or name in written))
        elif value is not None and not isinstance(value, (str, int, float)):
            _collect(name, value, written, arrays)
    if len(arrays) < 2:
        return
    extents = [_extent(a) for _, a, _ in arrays]
    for i, (name, _, is_written) in enumerate(arrays):
        if not is_written:
            continue
        start, end = extents[i]
        for j, (other, _, other_written) in enumerate(arrays):
            if j == i or (other_written and j < i):
                continue  # each written pair once
            o_start, o_end = extents[j]
            if start < o_end and o_start < end:
                if (start, end) == (o_start, o_end) and _allowed(fn, name, other):
                    continue
                exact = fn.may_alias.get(name)
                raise ShapeError(
                    f"{fn.__name__}: argument '{name}' (written) overlaps argument '{other}' in memory; "
                    "pass separate arrays"
                    + (f" ('{name}' may only be the very same array as {', '.join(map(repr, exact))})"
                       if exact else ""))


def _allowed(fn, a, b):
    allowed = fn._allowed
    if not allowed:
        return False
    roots = {a, a.split(".")[0]}, {b, b.split(".")[0]}
    return any((x, y) in allowed for x in roots[0] for y in roots[1])
