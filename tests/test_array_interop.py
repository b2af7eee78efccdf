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


@pytest.mark.parametrize("name", ["cpu", "cuda"])
def test_reshaped_shares_memory_and_refuses_another_size(name):
    device = drl.devices.device_from_name(name)
    a = drl.asarray(device, np.arange(6, dtype=np.float32).reshape(2, 3))
    rows = drl.arrays.reshaped(a, (6, 1))
    drl.fill(device, rows, 2.0)  # written through the (6, 1) view, seen through the (2, 3) array
    np.testing.assert_array_equal(drl.to_numpy(a), np.full((2, 3), 2.0))
    with pytest.raises(drl.ShapeError, match="reshaped"):
        drl.arrays.reshaped(a, (4, 1))


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


def test_to_numpy_takes_numpy_data_as_calls_return_it(tmp_path):
    from dispatchrl.data import MemmapStorage, ReplayBuffer

    rb = ReplayBuffer(MemmapStorage(8, tmp_path / "rb"), batch_size=4)
    rb.extend({"obs": np.arange(24, dtype=np.float32).reshape(8, 3)})
    leaf = rb.sample()["obs"]  # a numpy leaf, not an Array
    host = drl.to_numpy(leaf)
    assert type(host) is np.ndarray and not np.shares_memory(host, leaf)
    np.testing.assert_array_equal(host, leaf)
    stored = rb.storage.data["obs"]  # memory-mapped: the copy is a plain in-memory array
    assert isinstance(stored, np.memmap) and type(drl.to_numpy(stored)) is np.ndarray
    assert drl.to_numpy(np.float32(2.5)) == np.float32(2.5)
    with pytest.raises(drl.DeviceError, match="to_numpy: expected a dispatchrl Array or a numpy array, got list"):
        drl.to_numpy([1.0, 2.0])


# ---------------------------------------------------------------- a memory space added from outside

from dispatchrl import memory  # noqa: E402


class Boxed:
    """The data of the ``Ledger`` space: a numpy array that host code cannot read through."""

    def __init__(self, array):
        self.array = array
        self.shape, self.dtype, self.nbytes = array.shape, array.dtype, array.nbytes


class Ledger(memory.MemorySpace):
    """A memory space defined in this module alone: boxed arrays, every transfer logged."""

    tag = "test-ledger"


TRANSFERS = []


@memory.check_data.dispatch
def _(space: Ledger, device, data):
    if not isinstance(data, Boxed):
        raise drl.DeviceError(f"Array on {device!r} needs a Boxed array, got {type(data).__name__}")


@memory.zeros.dispatch
def _(space: Ledger, shape, dtype):
    return Boxed(np.zeros(shape, dtype))


@memory.from_host.dispatch
def _(space: Ledger, host):
    TRANSFERS.append("in")
    return Boxed(host.copy())


@memory.to_host.dispatch
def _(space: Ledger, data):
    TRANSFERS.append("out")
    return data.array.copy()


@memory.write.dispatch
def _(space: Ledger, data, values):
    TRANSFERS.append("in")
    data.array[...] = values


@memory.extent.dispatch
def _(space: Ledger, data):
    start = data.array.__array_interface__["data"][0]
    return start, start + data.nbytes


@memory.host_view.dispatch
def _(space: Ledger, data):
    return None


@memory.cuda_interface.dispatch
def _(space: Ledger, data):
    return None


class LedgerDevice(drl.Device):
    memory = "test-ledger"


def test_a_memory_space_is_one_module_of_methods():
    dev = LedgerDevice()
    TRANSFERS.clear()
    x = drl.asarray(dev, [[1.0, 2.0], [3.0, 4.0]], np.float32)
    assert isinstance(x.data, Boxed) and x.shape == (2, 2) and x.dtype == np.float32
    drl.assign(x, [[5.0, 6.0], [7.0, 8.0]])
    np.testing.assert_array_equal(drl.to_numpy(x), [[5.0, 6.0], [7.0, 8.0]])
    assert TRANSFERS == ["in", "in", "out"]
    np.testing.assert_array_equal(drl.to_numpy(drl.zeros(dev, 3, np.int64)), [0, 0, 0])
    with pytest.raises(drl.DeviceError, match="test-ledger memory; copy it to the host"):
        np.asarray(x)
    assert not hasattr(x, "__cuda_array_interface__")
    with pytest.raises(drl.DeviceError, match="needs a Boxed array"):
        drl.Array(dev, np.zeros(2))
    with pytest.raises(drl.ShapeError, match="matmul: argument 'out' \\(written\\) overlaps"):  # its extents
        drl.matmul(dev, x, drl.zeros(dev, (2, 2)), x)
    with pytest.raises(drl.DeviceError, match="has no method of dispatchrl.memory.map_host"):
        memory.map_host(memory.space_of(dev), np.zeros(2))


def test_a_device_of_an_unregistered_memory_space_is_refused():
    class Nowhere(drl.Device):
        memory = "nowhere"

    with pytest.raises(drl.DeviceError, match="memory 'nowhere', which no memory space is registered for"):
        drl.zeros(Nowhere(), 2)
