"""Device-tagged arrays whose type carries device, dtype and static shape.

``Array[CPU, np.float32, (100, 64)]`` is a concrete plum parametric type, so shapes are part of
what dispatch and staging see. ``__faithful__ = True`` keeps plum's dispatch cache on for them.
"""

from typing import Any

import numpy as np
from plum import parametric

from . import memory
from .devices import Device
from .errors import DeviceError, DTypeError, ShapeError
from .memory import space_of
from .memory.host import ALIGNMENT  # (importing the host space registers its methods)

__all__ = ["ALIGNMENT", "DTYPES", "Array", "asarray", "assign", "reshaped", "to_numpy", "view", "zeros"]

#: dtypes arrays may hold
DTYPES = (np.float32, np.float64, np.int32, np.int64, np.uint64, np.bool_)


def _dtype_type(dtype, name="dtype") -> type:
    try:
        t = np.dtype(dtype).type
    except TypeError:
        raise DTypeError(f"{name}: {dtype!r} is not a dtype") from None
    if t not in DTYPES:
        raise DTypeError(
            f"{name}: dtype {np.dtype(t).name} is not supported; expected one of "
            + ", ".join(np.dtype(d).name for d in DTYPES)
        )
    return t


def _shape_tuple(shape, name="shape") -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    try:
        shape = tuple(int(s) for s in shape)
    except TypeError:
        raise ShapeError(f"{name}: expected a tuple of ints, got {shape!r}") from None
    if not shape or any(s <= 0 for s in shape):
        raise ShapeError(f"{name}: expected a non-empty tuple of positive ints, got {shape}")
    return shape


@parametric
class Array:
    """An array on one device. ``.data`` is the raw array of the device's memory space (a numpy
    array on host devices, a numba device array on CUDA); kernels receive ``.data``, never the
    wrapper."""

    __faithful__ = True

    @classmethod
    def __init_type_parameter__(cls, device_type, dtype, shape) -> tuple[type, type, tuple[int, ...]]:
        if not (isinstance(device_type, type) and issubclass(device_type, Device)):
            raise DeviceError(f"Array device parameter must be a Device class, got {device_type!r}")
        return device_type, _dtype_type(dtype), _shape_tuple(shape)

    @classmethod
    def __infer_type_parameter__(cls, device, data) -> tuple[type, type, tuple[int, ...]]:
        return type(device), data.dtype.type, tuple(data.shape)

    def __init__(self, device, data):
        memory.check_data(space_of(device), device, data)
        self.device = device
        self.data = data

    @property
    def shape(self) -> tuple[int, ...]:
        return (_type_parameters.get(type(self)) or _parameters_of(type(self)))[2]

    @property
    def dtype(self) -> np.dtype:
        return (_type_parameters.get(type(self)) or _parameters_of(type(self)))[1]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    def __repr__(self) -> str:
        return f"Array[{self.device!r}, {self.dtype.name}, {self.shape}]"

    # numpy, CuPy and PyTorch take Arrays without copies where the memory allows it; a transfer off
    # the GPU is never implicit (dispatchrl.to_numpy copies).
    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        host = memory.host_view(space_of(self.device), self.data)
        if host is None:
            raise DeviceError(
                f"{self!r} lives in {self.device.memory} memory; copy it to the host with dispatchrl.to_numpy(x)"
            )
        if copy:
            return np.array(host, dtype=dtype, copy=True)
        if dtype is not None and np.dtype(dtype) != host.dtype:
            if copy is False:
                raise ValueError(f"{self!r} cannot be viewed as {np.dtype(dtype).name} without a copy")
            return host.astype(dtype)
        return host

    @property
    def __cuda_array_interface__(self) -> dict:
        interface = memory.cuda_interface(space_of(self.device), self.data)
        if interface is None:  # an AttributeError: hasattr(x, "__cuda_array_interface__") is False
            raise AttributeError(f"{self!r} is a host array: it has __array__ and __dlpack__, not the CUDA interface")
        return interface

    def _dlpack_source(self) -> np.ndarray:
        host = memory.host_view(space_of(self.device), self.data)
        if host is None:  # numba device arrays do not export DLPack
            raise DeviceError(
                f"{self!r}: DLPack export is for host arrays; use __cuda_array_interface__ on CUDA "
                "or copy with dispatchrl.to_numpy(x)"
            )
        return host

    def __dlpack__(self, **kwargs) -> Any:
        return self._dlpack_source().__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._dlpack_source().__dlpack_device__()


#: Array type → (device type, dtype, shape): plum's ``type_parameter`` costs ~1 µs a read, and
#: eager calls read shapes and dtypes several times each
_type_parameters: dict[type, tuple[type, np.dtype, tuple[int, ...]]] = {}


def _parameters_of(array_type: type) -> tuple[type, np.dtype, tuple[int, ...]]:
    device_type, dtype, shape = array_type.type_parameter  # type: ignore[attr-defined]  # set by @parametric
    parameters = _type_parameters[array_type] = (device_type, np.dtype(dtype), shape)
    return parameters


def _check_device(device) -> None:
    if not isinstance(device, Device):
        raise DeviceError(f"device: expected a dispatchrl Device (e.g. CPU()), got {device!r}")


def zeros(device, shape, dtype=np.float32) -> Array:
    """A zero-filled array of ``shape`` and ``dtype`` on ``device``."""
    _check_device(device)
    return Array(device, memory.zeros(space_of(device), _shape_tuple(shape), _dtype_type(dtype)))


def view(flat, offset, shape) -> Array:
    """An Array over ``flat``'s elements [offset, offset + prod(shape)), shaped ``shape``: same
    memory, on the same device (host or CUDA)."""
    shape = _shape_tuple(shape)
    size = int(np.prod(shape))
    if flat.ndim != 1 or not 0 <= offset <= flat.size - size:
        raise ShapeError(f"view: elements [{offset}, {offset + size}) do not fit a flat array of {flat.shape}")
    return Array(flat.device, flat.data[offset : offset + size].reshape(shape))


def reshaped(a: Array, shape) -> Array:
    """An Array over ``a``'s memory with another ``shape`` of the same size (``a`` is contiguous,
    as every Array dispatchrl makes): a write through either is seen by both."""
    shape = _shape_tuple(shape)
    if int(np.prod(shape)) != a.size:
        raise ShapeError(f"reshaped: {a.shape} has {a.size} elements, {shape} would need {int(np.prod(shape))}")
    return Array(a.device, a.data.reshape(shape))


def asarray(device, x, dtype=None) -> Array:
    """Copy ``x`` (numpy data, or an Array on any device) to ``device``. Transfers are explicit:
    this is the host→device one."""
    _check_device(device)
    if isinstance(x, Array):
        x = to_numpy(x)
    host: np.ndarray = np.array(x, dtype=_dtype_type(dtype if dtype is not None else np.asarray(x).dtype), order="C")
    if host.ndim == 0:
        host = host.reshape(1)
    _shape_tuple(host.shape, "x.shape")
    return Array(device, memory.from_host(space_of(device), host))


def to_numpy(x) -> np.ndarray:
    """A host numpy copy of ``x``: an Array in any memory space (device→host transfer for CUDA),
    or numpy data as some calls return it (arrays, memmaps: a plain in-memory copy; scalars)."""
    if isinstance(x, Array):
        return memory.to_host(space_of(x.device), x.data)
    if isinstance(x, (np.ndarray, np.generic)):
        return np.array(x)
    raise DeviceError(f"to_numpy: expected a dispatchrl Array or a numpy array, got {type(x).__name__}")


def assign(x, values) -> None:
    """Overwrite the contents of Array ``x`` with host ``values`` (same shape, cast to x's dtype)."""
    if not isinstance(x, Array):
        raise DeviceError(f"assign: expected a dispatchrl Array, got {type(x).__name__}")
    values = np.asarray(values)
    if values.shape != x.shape:
        raise ShapeError(f"assign: values has shape {values.shape}, expected {x.shape}")
    memory.write(space_of(x.device), x.data, np.ascontiguousarray(values, dtype=x.dtype))
