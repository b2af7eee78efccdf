"""CUDA kernels are tested in numba's CUDA simulator unless NUMBA_ENABLE_CUDASIM is set
explicitly (set it to 0 on a machine with a GPU to test the real thing)."""

import os

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

import pytest  # noqa: E402

import dispatchrl  # noqa: E402


@pytest.fixture(scope="session")
def cuda_device():
    return dispatchrl.CUDA()


@pytest.fixture(params=["generic", "cpu", "cuda", "c"])
def device(request):
    """Every backend in turn (CUDA under the simulator unless a GPU is configured; C with the host
    compiler)."""
    return dispatchrl.devices.device_from_name(request.param)
