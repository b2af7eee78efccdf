"""The CUDA memory space: numba.cuda device arrays (real, or the simulator's), imported when a
CUDA device is made (``CUDA.method_modules``)."""

import numpy as np
from numba import config, cuda

from ..errors import DeviceError, ShapeError
from . import MemorySpace, check_data, cuda_interface, extent, from_host, host_view, map_host, to_host, write, zeros

__all__ = ["CudaMemory"]


class CudaMemory(MemorySpace):
    """GPU memory: the CUDA device."""

    tag = "cuda"


@check_data.dispatch
def _(space: CudaMemory, device, data):
    # numba device arrays, real or simulated (the simulator lacks cuda.is_cuda_array)
    if not (hasattr(data, "copy_to_host") and hasattr(data, "is_c_contiguous")):
        raise DeviceError(f"Array on {device!r} needs a CUDA device array, got {type(data).__name__}")
    if not data.is_c_contiguous():
        raise ShapeError("Array data must be C-contiguous; copy it with dispatchrl.asarray")


@zeros.dispatch
def _(space: CudaMemory, shape, dtype):
    return cuda.to_device(np.zeros(shape, dtype))


@from_host.dispatch
def _(space: CudaMemory, host):
    return cuda.to_device(host)


@to_host.dispatch
def _(space: CudaMemory, data):
    return data.copy_to_host()


@write.dispatch
def _(space: CudaMemory, data, values):
    data.copy_to_device(values)


@extent.dispatch
def _(space: CudaMemory, data):
    if hasattr(data, "device_ctypes_pointer"):
        start = data.device_ctypes_pointer.value or 0
    else:  # the simulator's arrays wrap a numpy array
        start = data._ary.__array_interface__["data"][0]
    return start, start + data.nbytes


@host_view.dispatch
def _(space: CudaMemory, data):
    return None


@cuda_interface.dispatch
def _(space: CudaMemory, data):
    return data.__cuda_array_interface__


@map_host.dispatch
def _(space: CudaMemory, host):
    """``host`` pinned and mapped into the device's address space (zero-copy)."""
    if getattr(config, "ENABLE_CUDASIM", 0):
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        return FakeCUDAArray(host)
    from numba.cuda.cudadrv import devicearray, driver

    try:
        pinned = cuda.current_context().mempin(host, driver.host_pointer(host), host.nbytes, mapped=True)
    except Exception as error:  # the driver's refusal, e.g. a file system it cannot pin
        raise DeviceError(f"the CUDA driver cannot map this host memory: {error}") from error
    return devicearray.from_array_like(host, gpu_data=pinned)
