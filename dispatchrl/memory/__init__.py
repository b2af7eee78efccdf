"""Memory spaces: where an Array's data lives, and the operations that depend on nothing else.

A device names its memory space by tag (``Device.memory``: ``"host"`` or ``"cuda"``); devices of
one space share arrays. Each space is a :class:`MemorySpace` subclass, and what differs between
spaces (allocating, copying in and out, writing, the address range, host and CUDA views) are
methods of the dispatched functions below (:mod:`dispatchrl.functions`), dispatched on the
space: one module per space, :mod:`.host` (numpy, imported by :mod:`dispatchrl.arrays`) and
:mod:`.cuda` (numba.cuda, imported when a CUDA device is made). A new memory space is one more
such module: a subclass with its ``tag`` and its methods.
"""

from collections.abc import Callable
from typing import Any

from ..errors import DeviceError
from ..functions import DispatchedFunction

__all__ = [
    "MemorySpace",
    "check_data",
    "cuda_interface",
    "extent",
    "from_host",
    "host_view",
    "map_host",
    "space_of",
    "to_host",
    "write",
    "zeros",
]


class MemorySpace:
    """A memory space; subclasses set ``tag``, the ``Device.memory`` value of their devices, and
    are registered under it (one instance each: spaces are tags, like devices)."""

    tag = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.tag:
            raise DeviceError(f"MemorySpace {cls.__name__}: set 'tag', the Device.memory value of its devices")
        _SPACES[cls.tag] = cls()

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


#: Device.memory tag → its space
_SPACES: dict[str, MemorySpace] = {}


def space_of(device: Any) -> MemorySpace:
    """The memory space of ``device`` (a Device), by its ``memory`` tag."""
    try:
        return _SPACES[device.memory]
    except KeyError:
        raise DeviceError(
            f"{device!r} has memory {device.memory!r}, which no memory space is registered for; "
            "define a dispatchrl.memory.MemorySpace subclass with that tag and its methods"
        ) from None


def _per_space(declaration: Callable[..., Any]) -> DispatchedFunction:
    """A function dispatched on its first argument, a MemorySpace; a space without a method gets
    a DeviceError naming the function."""
    name = declaration.__name__.lstrip("_")
    return DispatchedFunction(
        declaration,
        lambda args: DeviceError(
            f"memory space {args[0]!r} has no method of dispatchrl.memory.{name}; "
            f"register one with @dispatchrl.memory.{name}.dispatch"
        ),
        name,
    )


def _check_data(space, device, data) -> None:
    """Refuse ``data`` as the data of an Array on ``device`` unless it is this space's kind of
    array, C-contiguous."""


def _zeros(space, shape, dtype) -> Any:
    """Zero-filled data of ``shape`` (a tuple) and ``dtype`` (a numpy scalar type)."""


def _from_host(space, host) -> Any:
    """Data holding a copy of ``host``, a C-contiguous numpy array (host→device transfer)."""


def _to_host(space, data) -> Any:
    """A plain numpy copy of ``data`` (device→host transfer)."""


def _write(space, data, values) -> None:
    """Overwrite ``data`` with ``values``, a C-contiguous numpy array of its shape and dtype."""


def _extent(space, data) -> Any:
    """[start, end) addresses of ``data``'s (C-contiguous, so gap-free) memory, for the
    aliasing check; spaces must not share addresses unless their memory is the same."""


def _host_view(space, data) -> Any:
    """``data`` as a numpy array over the same memory, or None where host code cannot address it."""


def _cuda_interface(space, data) -> Any:
    """``data``'s ``__cuda_array_interface__``, or None where it has none."""


def _map_host(space, host) -> Any:
    """Data over the memory of numpy array ``host``, without a copy (memory-mapped replay files)."""


check_data = _per_space(_check_data)
zeros = _per_space(_zeros)
from_host = _per_space(_from_host)
to_host = _per_space(_to_host)
write = _per_space(_write)
extent = _per_space(_extent)
host_view = _per_space(_host_view)
cuda_interface = _per_space(_cuda_interface)
map_host = _per_space(_map_host)
