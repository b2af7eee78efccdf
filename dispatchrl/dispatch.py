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

Eager calls check once per kind of call: a call whose arguments are all Arrays, Devices and plain
scalars (ints, floats, bools, strings, enums, None) remembers, under their types (an Array's type
holds its device, dtype and shape) and the scalars' values, what the declaration returned and
which method plum chose; a later call of the same kind skips both, and the aliasing check skips
memory layouts it has passed before. A declaration must therefore depend on nothing else (not on
an array's values), as every built-in one does. Any refusal is raised by the declaration itself,
whose failures are never remembered. Registering a method forgets the remembered calls.
"""

import dataclasses
import enum
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np
import plum

from .arrays import Array
from .devices import Device
from .errors import ConfigError, DeviceError, ShapeError
from .functions import DispatchedFunction
from .memory import extent, space_of

__all__ = ["GENERIC_FUNCTIONS", "GenericFunction", "check_aliasing", "generic", "invoke", "keyed_leaves"]

#: every public generic function, in declaration order (tests check each stays cache-friendly)
GENERIC_FUNCTIONS: list = []


class GenericFunction(DispatchedFunction):
    """A generic function made by ``@generic``: a plum function over (device, arguments...) with its declared
    outputs and in-place arguments, checked before any method (kernel) runs."""

    kind = "generic function"

    def __init__(self, declaration, outputs=None, inplace=(), may_alias=None):
        super().__init__(declaration, self._no_device_method)
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
                raise ConfigError(f"@generic {self.__name__}: {name!r} is not a parameter of the declaration")
        for name in self.may_alias:
            if written is not None and name not in written:
                raise ConfigError(f"@generic {self.__name__}: may_alias key {name!r} is not an output")
        self._written = written
        self._written_leaf = {}  # argument path → written? (memoised for check_aliasing)
        self._written_params = None if written is None else frozenset(written)
        self._field_paths = {}  # (argument, struct type) → [(field, path)] (memoised)
        self._allowed = frozenset((a, b) for a, bs in self.may_alias.items() for b in bs for a, b in ((a, b), (b, a)))
        self._calls: dict[tuple, _CheckedCall] = {}  # call key (see _call_key) → what its check found

    def dispatch(self, method=None, precedence=0) -> Any:
        """Register a method (plum's ``Function.dispatch``): annotate the device argument."""
        self._calls.clear()
        if method is None:  # @fn.dispatch(precedence=...): forget again once the method is given
            register = self.function.dispatch(precedence=precedence)

            def decorate(method) -> Any:
                self._calls.clear()
                return register(method)

            return decorate
        return self.function.dispatch(method, precedence=precedence)

    def resolve(self, *args) -> Callable[..., Any]:
        """The plum method that ``self(*args)`` would run (after validation)."""
        args = self.declaration(*args)
        check_aliasing(self, args)
        return self.function.resolve_method(args)[0]

    def __call__(self, *args, **kwargs) -> Any:
        # a call of Arrays and Devices only has its types as key (no scalar values in it)
        checked = None if kwargs else self._calls.get(tuple(map(type, args)))
        if checked is None:
            key = None if kwargs else _call_key(args)
            checked = self._calls.get(key) if key is not None else None
            if checked is None:
                return self._first_call(key, args, kwargs)
        call_args = args if checked.template is None else checked.arguments(args)
        positions = checked.arrays
        if positions:
            try:  # the extents cached on the Arrays (every Array checked once has one)
                layout = tuple([args[i]._extent for i in positions])
            except AttributeError:
                layout = tuple([_extent(args[i]) for i in positions])
            if layout not in checked.layouts:
                check_aliasing(self, call_args)
                if len(checked.layouts) >= _MAX_LAYOUTS:
                    checked.layouts.clear()
                checked.layouts.add(layout)
        return checked.method(*call_args)

    def _first_call(self, key: tuple | None, args: tuple, kwargs: dict) -> Any:
        """A call of a kind not seen yet (or not rememberable): the declaration, the aliasing
        check and plum's method resolution, remembered under ``key`` when they all pass."""
        call_args = self.declaration(*args, **kwargs)
        check_aliasing(self, call_args)
        result = super().__call__(*call_args)
        if key is not None:
            method, return_type = self.function.resolve_method(call_args)  # plum's cache has it now
            checked = _CheckedCall.of(args, call_args, method) if return_type is Any else None
            if checked is not None:  # (a return annotation: plum converts the result, so it calls)
                checked.layouts.add(tuple(_extent(args[i]) for i in checked.arrays))
                self._calls[key] = checked
        return result

    def _no_device_method(self, args: tuple) -> DeviceError:
        return DeviceError(
            f"{self.__name__} has no method for device {args[0]!r}; register one with @dispatchrl.{self.__name__}.dispatch"
        )


def invoke(fn: "GenericFunction", device_type: type) -> "Callable[..., object]":
    """``fn``'s method for ``device_type``, callable on any device (Julia's ``invoke``)::

        @drl.matmul.dispatch
        def matmul(device: Counting, a, b, out):
            drl.invoke(drl.matmul, drl.CPU)(device, a, b, out)   # CPU's method, device kept

    The declaration still validates the arguments; the other arguments dispatch on their own
    types as usual. Where the parent device is easy to make, ``drl.matmul(drl.CPU(), a, b, out)``
    does the same (arrays of one memory space are accepted by every device of that space)."""
    if not isinstance(fn, GenericFunction):
        raise ConfigError(f"invoke: argument 'fn' must be a dispatchrl generic function, got {fn!r}")
    if not isinstance(device_type, type):
        raise ConfigError(f"invoke: argument 'device_type' must be a Device class, got {device_type!r}")

    def call(*args, **kwargs) -> Any:
        args = fn.declaration(*args, **kwargs)
        check_aliasing(fn, args)
        try:
            method = fn.function.invoke(device_type, *(type(a) for a in args[1:]))
        except plum.NotFoundLookupError:
            raise DeviceError(
                f"invoke: {fn.__name__} has no method for {device_type.__name__} and these arguments"
            ) from None
        return method(*args)

    call.__name__ = f"{fn.__name__}_as_{device_type.__name__}"
    return call


def generic(declaration=None, *, outputs=None, inplace=(), may_alias=None) -> Any:
    """Declare a generic function; the decorated body validates and returns the argument tuple.
    Bare ``@generic`` or ``@generic(outputs=..., inplace=..., may_alias=...)`` (see the module)."""

    def decorate(declaration) -> GenericFunction:
        fn = GenericFunction(declaration, outputs, inplace, may_alias)
        GENERIC_FUNCTIONS.append(fn)
        return fn

    return decorate if declaration is None else decorate(declaration)


# ---------------------------------------------------------------- remembered checks

#: memory layouts remembered per kind of call (a bound: fresh arrays every call would grow it)
_MAX_LAYOUTS = 64
_BY_TYPE, _BY_VALUE, _FLOAT = "type", "value", "float"
_key_kinds: dict[type, str | None] = {}


def _key_kind(t: type) -> str | None:
    """How an argument of type ``t`` enters a call key: its type (Arrays, Devices), its type and
    value (plain scalars), or not at all (None: the call is not remembered)."""
    kind = _key_kinds.get(t, "")
    if kind == "":
        if issubclass(t, (Array, Device)):
            kind = _BY_TYPE
        elif issubclass(t, (float, np.floating)):
            kind = _FLOAT
        elif t in (int, bool, str, bytes, type(None)) or issubclass(t, (np.integer, np.bool_, enum.Enum)):
            kind = _BY_VALUE
        else:
            kind = None
        _key_kinds[t] = kind
    return kind


def _call_key(args: tuple) -> tuple | None:
    """The kind of a call: Arrays and Devices by type, scalars by type and value (a float zero
    with its sign); None where an argument is anything else."""
    key: list[object] = []
    for value in args:
        t = type(value)
        kind = _key_kinds.get(t) or _key_kind(t)
        if kind is _BY_TYPE:
            key.append(t)
        elif kind is _BY_VALUE:
            key.append((t, value))
        elif kind is _FLOAT:
            key.append((t, value, str(value)) if value == 0 else (t, value))
        else:
            return None
    return tuple(key)


class _CheckedCall:
    """What the checks of one kind of call found: the normalised arguments (``template``: per
    position the index of the passed argument, or a constant; None when they are the arguments
    themselves), the method, the positions of its Arrays and the memory layouts already checked."""

    __slots__ = ("arrays", "layouts", "method", "template")

    def __init__(self, template, method, arrays) -> None:
        self.template, self.method, self.arrays = template, method, arrays
        self.layouts: set[tuple] = set()

    @classmethod
    def of(cls, args: tuple, call_args: tuple, method) -> "_CheckedCall | None":
        """None where the normalised arguments are not the given ones or constants."""
        template: list | None = []
        assert template is not None
        for position, value in enumerate(call_args):
            found = [i for i, a in enumerate(args) if a is value]
            if position in found:  # passed through (the same object may be passed twice)
                template.append(position)
            elif len(found) == 1:  # moved
                template.append(found[0])
            elif found:  # which of the equal arguments it was is unknown
                return None
            elif _key_kind(type(value)) in (_BY_VALUE, _FLOAT):
                template.append(_Constant(value))
            else:
                return None
        if template == list(range(len(args))):
            template = None
        arrays = tuple(i for i, a in enumerate(args) if _is_array(a))
        arrays = arrays if len(arrays) > 1 else ()  # one Array overlaps nothing
        return cls(None if template is None else tuple(template), method, arrays)

    def arguments(self, args: tuple) -> tuple:
        return tuple([t.value if type(t) is _Constant else args[t] for t in self.template])


class _Constant:
    __slots__ = ("value",)

    def __init__(self, value) -> None:
        self.value = value


# ---------------------------------------------------------------- aliasing
# Eager calls pay for this check on every call (fused steps only while tracing), so it avoids
# isinstance on plum's parametric types, caches per type and per Array, and finds overlaps by
# sorting extents instead of comparing every pair.

_array_types: set[type] = set()
_plain_types = {str, bytes, int, float, bool, type(None)}
_struct_fields_cache: dict = {}


def _is_array(value) -> bool:
    t = type(value)
    if t in _array_types:
        return True
    if t in _plain_types or not issubclass(t, Array):
        return False
    _array_types.add(t)
    return True


def _extent(array) -> tuple[int, int]:
    """[start, end) byte addresses of an Array's (C-contiguous, so gap-free) memory, as its
    memory space gives them, cached on the Array: its ``data`` never changes."""
    found = array.__dict__.get("_extent")
    if found is None:
        found = array._extent = extent(space_of(array.device), array.data)
    return found


def _struct_fields(value) -> tuple[str, ...]:
    """Field names of a struct argument (dataclass or plain object); dataclass fields marked
    ``checkpoint=False`` hold storage other fields are views of (nn.MLP.groups) and are skipped."""
    t = type(value)
    names = _struct_fields_cache.get(t)
    if names is None:
        if dataclasses.is_dataclass(t):
            names = tuple(f.name for f in dataclasses.fields(t) if f.metadata.get("checkpoint", True))
            _struct_fields_cache[t] = names
        else:
            return tuple(getattr(value, "__dict__", ()))
    return names


def keyed_leaves(value, prefix) -> list | None:
    """(``prefix`` + key path, leaf) of a struct whose Arrays are keyed leaves rather than
    attributes, i.e. whose class defines ``__dispatchrl_leaves__(self, prefix)`` (dispatchrl.data's
    TensorDict, a later layer); None for anything else. The aliasing check, ``fuse``'s argument
    check and checkpoints walk such leaves as they walk a dataclass's fields."""
    leaves = getattr(type(value), "__dispatchrl_leaves__", None)
    return None if leaves is None else leaves(value, prefix)


def _collect(fn, name, value, out, depth=0) -> None:
    """Append (start, end, path, is written) for the Arrays of argument ``name``."""
    if _is_array(value):
        written = fn._written_leaf.get(name)
        if written is None:
            written = fn._written_leaf[name] = fn._written is None or any(
                name == w or name.startswith(w + ".") for w in fn._written
            )
        out.append((*_extent(value), name, written))
    elif type(value) in _plain_types or isinstance(value, (np.generic, type)) or depth > 4:
        return
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _collect(fn, f"{name}.{i}", item, out, depth + 1)
    else:
        paths = fn._field_paths.get((name, type(value)))
        if paths is None:
            leaves = keyed_leaves(value, name + ".")
            if leaves is not None:  # keys differ per instance: nothing to memoise
                for path, item in leaves:
                    _collect(fn, path, item, out, depth + 1)
                return
            paths = [(f, f"{name}.{f}") for f in _struct_fields(value)]
            if type(value) in _struct_fields_cache:  # a dataclass: the same fields for every instance
                fn._field_paths[(name, type(value))] = paths
        for field, path in paths:
            item = getattr(value, field)
            if type(item) in _array_types:  # inlined: structs are mostly Arrays
                written = fn._written_leaf.get(path)
                if written is not None:
                    extent = item.__dict__.get("_extent") or _extent(item)
                    out.append((extent[0], extent[1], path, written))
                    continue
            _collect(fn, path, item, out, depth + 1)


def check_aliasing(fn, args) -> None:
    """Refuse (ShapeError) any overlap between a written Array of ``args`` (a call's normalised
    arguments) and another Array argument, except the exact aliases ``fn.may_alias`` allows."""
    items = []
    written_params = fn._written_params
    for name, value in zip(fn.parameters[1:], args[1:]):
        t = type(value)
        if t in _array_types:  # the common case, inlined
            extent = value.__dict__.get("_extent") or _extent(value)
            items.append((extent[0], extent[1], name, written_params is None or name in written_params))
        elif t not in _plain_types:
            _collect(fn, name, value, items)
    if len(items) < 2:
        return
    items.sort()
    for i in range(len(items) - 1):
        start, end, name, written = items[i]
        for j in range(i + 1, len(items)):
            o_start, o_end, other, other_written = items[j]
            if o_start >= end:
                break  # sorted by start: nothing later overlaps items[i]
            if not (written or other_written):
                continue  # two reads of the same memory
            if (start, end) == (o_start, o_end) and _allowed(fn, name, other):
                continue
            if not written:
                name, other = other, name
            exact = fn.may_alias.get(name)
            raise ShapeError(
                f"{fn.__name__}: argument '{name}' (written) overlaps argument '{other}' in memory; "
                "pass separate arrays"
                + (f" ('{name}' may only be the very same array as {', '.join(map(repr, exact))})" if exact else "")
            )


def _allowed(fn, a, b) -> bool:
    allowed = fn._allowed
    if not allowed:
        return False
    roots = {a, a.split(".")[0]}, {b, b.split(".")[0]}
    return any((x, y) in allowed for x in roots[0] for y in roots[1])
