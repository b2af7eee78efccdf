"""Arrays meet numpy (and CuPy/PyTorch) through the standard protocols, never as object arrays."""

import os

import numpy as np
import pytest

import dispatchrl as drl


def test_numpy_views_a_host_array_without_copying():
    x = drl.asarray(drl.CPU(), np.arange(6, dtype=np.float32).reshape(2, 3))
    view = np.asarray(x)
    assert view.dtype == np.float32 and view.shape == (2, 3)
    assert np.shares_memory(view, x.data)
    view[0, 0] = 7.0
    assert drl.to_numpy(x)[0, 0] == 7.0
    assert not np.shares_memory(np.array(x, copy=True), x.data)
    np.testing.assert_array_equal(np.asarray(x, dtype=np.float64), x.data.astype(np.float64))


def test_dlpack_shares_host_memory():
    x = drl.asarray(drl.Generic(), np.arange(4.0))
    y = np.from_dlpack(x)
    assert np.shares_memory(y, x.data)


def test_a_gpu_array_is_never_copied_implicitly(cuda_device):
    x = drl.zeros(cuda_device, (2, 2))
    with pytest.raises(drl.DeviceError, match="to_numpy"):
        np.asarray(x)
    with pytest.raises(drl.DeviceError, match="DLPack"):
        x.__dlpack__()
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":  # the simulator's arrays do not export it
        assert tuple(x.__cuda_array_interface__["shape"]) == (2, 2)
    assert not hasattr(drl.zeros(drl.CPU(), 2), "__cuda_array_interface__")
