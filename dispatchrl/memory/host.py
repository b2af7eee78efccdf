"""The host memory space: numpy arrays, allocated on 64-byte boundaries."""

from typing import Any

import numpy as np

from ..errors import DeviceError, ShapeError
from . import MemorySpace, check_data, cuda_interface, extent, from_host, host_view, map_host, to_host, write, zeros

__all__ = ["ALIGNMENT", "HostMemory", "aligned_empty"]


class HostMemory(MemorySpace):
    """numpy arrays in main memory: Generic, CPU and C devices."""

    tag = "host"


#: host arrays start on a cache-line boundary: numpy's allocator gives 16-byte alignment, and
#: 64-byte vector loads that straddle two lines made the fused TD3 kernels ~10% slower
ALIGNMENT = 64


def aligned_empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on an ``ALIGNMENT``-byte boundary."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    raw = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    return raw[start : start + nbytes].view(dtype).reshape(shape)


@check_data.dispatch
def _(space: HostMemory, device, data):
    if not isinstance(data, np.ndarray):
        raise DeviceError(f"Array on {device!r} needs a numpy array, got {type(data).__name__}")
    if not data.flags.c_contiguous:
        raise ShapeError("Array data must be C-contiguous; copy it with dispatchrl.asarray")


@zeros.dispatch
def _(space: HostMemory, shape, dtype):
    out = aligned_empty(shape, dtype)
    out[...] = 0
    return out


@from_host.dispatch
def _(space: HostMemory, host):
    out = aligned_empty(host.shape, host.dtype)
    out[...] = host
    return out


@to_host.dispatch
def _(space: HostMemory, data):
    return np.array(data)  # a plain ndarray also where data is a memmap


@write.dispatch
def _(space: HostMemory, data, values):
    data[...] = values


@extent.dispatch
def _(space: HostMemory, data):
    start = data.__array_interface__["data"][0]
    return start, start + data.nbytes


@host_view.dispatch
def _(space: HostMemory, data):
    return data


@cuda_interface.dispatch
def _(space: HostMemory, data):
    return None


@map_host.dispatch
def _(space: HostMemory, host):
    return host
