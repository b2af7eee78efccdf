"""Device-tagged arrays whose type carries device, dtype and static shape.

``Array[CPU, np.float32, (100, 64)]`` is a concrete plum parametric type, so shapes are part of
what dispatch and staging see. ``__faithful__ = True`` keeps plum's dispatch cache on for them.
"""

from typing import Any

import numpy as np
from plum import parametric

from .devices import Device
from .errors import DeviceError, DTypeError, ShapeError

__all__ = ["DTYPES", "Array", "asarray", "assign", "to_numpy", "view", "zeros"]

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
    """An array on one device. ``.data`` is the raw numpy array (host devices) or numba device
    array (CUDA); kernels receive ``.data``, never the wrapper."""

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
        if device.memory == "host":
            if not isinstance(data, np.ndarray):
                raise DeviceError(f"Array on {device!r} needs a numpy array, got {type(data).__name__}")
            contiguous = data.flags.c_contiguous
        else:
            # numba device arrays, real or simulated (the simulator lacks cuda.is_cuda_array)
            if not (hasattr(data, "copy_to_host") and hasattr(data, "is_c_contiguous")):
                raise DeviceError(f"Array on {device!r} needs a CUDA device array, got {type(data).__name__}")
            contiguous = data.is_c_contiguous()
        if not contiguous:
            raise ShapeError("Array data must be C-contiguous; copy it with dispatchrl.asarray")
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
        if self.device.memory != "host":
            raise DeviceError(f"{self!r} lives in GPU memory; copy it to the host with dispatchrl.to_numpy(x)")
        if copy:
            return np.array(self.data, dtype=dtype, copy=True)
        if dtype is not None and np.dtype(dtype) != self.data.dtype:
            if copy is False:
                raise ValueError(f"{self!r} cannot be viewed as {np.dtype(dtype).name} without a copy")
            return self.data.astype(dtype)
        return self.data

    @property
    def __cuda_array_interface__(self) -> dict:
        if self.device.memory != "cuda":
            raise AttributeError(f"{self!r} is a host array: it has __array__ and __dlpack__, not the CUDA interface")
        return self.data.__cuda_array_interface__

    def __dlpack__(self, **kwargs) -> Any:
        if self.device.memory != "host":  # numba device arrays do not export DLPack
            raise DeviceError(f"{self!r}: DLPack export is for host arrays; use __cuda_array_interface__ on CUDA")
        return self.data.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        if self.device.memory != "host":
            raise DeviceError(f"{self!r}: DLPack export is for host arrays; use __cuda_array_interface__ on CUDA")
        return self.data.__dlpack_device__()


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


#: host arrays start on a cache-line boundary: numpy's allocator gives 16-byte alignment, and
#: 64-byte vector loads that straddle two lines made the fused TD3 kernels ~10% slower
ALIGNMENT = 64


def _aligned_copy(host) -> np.ndarray:
    """A C-contiguous copy of ``host`` whose data starts on an ``ALIGNMENT``-byte boundary."""
    raw = np.empty(host.nbytes + ALIGNMENT, dtype=np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    out = raw[start : start + host.nbytes].view(host.dtype).reshape(host.shape)
    out[...] = host
    return out


def zeros(device, shape, dtype=np.float32) -> Array:
    """A zero-filled array of ``shape`` and ``dtype`` on ``device``."""
    _check_device(device)
    host: np.ndarray = np.zeros(_shape_tuple(shape), dtype=_dtype_type(dtype))
    return asarray(device, host)


def view(flat, offset, shape) -> Array:
    """An Array over ``flat``'s elements [offset, offset + prod(shape)), shaped ``shape``: same
    memory, on the same device (host or CUDA)."""
    shape = _shape_tuple(shape)
    size = int(np.prod(shape))
    if flat.ndim != 1 or not 0 <= offset <= flat.size - size:
        raise ShapeError(f"view: elements [{offset}, {offset + size}) do not fit a flat array of {flat.shape}")
    return Array(flat.device, flat.data[offset : offset + size].reshape(shape))


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
    if device.memory == "cuda":
        from numba import cuda

        return Array(device, cuda.to_device(host))
    return Array(device, _aligned_copy(host))


def to_numpy(x) -> np.ndarray:
    """A host numpy copy of an Array (device→host transfer for CUDA)."""
    if not isinstance(x, Array):
        raise DeviceError(f"to_numpy: expected a dispatchrl Array, got {type(x).__name__}")
    if x.device.memory == "cuda":
        return x.data.copy_to_host()
    return x.data.copy()


def assign(x, values) -> None:
    """Overwrite the contents of Array ``x`` with host ``values`` (same shape, cast to x's dtype)."""
    if not isinstance(x, Array):
        raise DeviceError(f"assign: expected a dispatchrl Array, got {type(x).__name__}")
    values = np.asarray(values)
    if values.shape != x.shape:
        raise ShapeError(f"assign: values has shape {values.shape}, expected {x.shape}")
    values = np.ascontiguousarray(values, dtype=x.dtype)
    if x.device.memory == "cuda":
        x.data.copy_to_device(values)
    else:
        x.data[...] = values
