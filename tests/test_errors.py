"""Bad input is refused before any kernel runs, with a dispatchrl error naming the argument."""

import os
import subprocess
import sys

import numpy as np
import pytest

import dispatchrl as drl
from dispatchrl import nn


@pytest.fixture
def cpu():
    return drl.CPU()


def test_shape_error_names_argument_and_shapes(cpu):
    a, b, out = drl.zeros(cpu, (3, 4)), drl.zeros(cpu, (5, 2)), drl.zeros(cpu, (3, 2))
    with pytest.raises(drl.ShapeError, match=r"matmul: argument 'b' has shape \(5, 2\), expected \(4, \*\)"):
        drl.matmul(cpu, a, b, out)
    with pytest.raises(drl.ShapeError, match=r"'out' has shape \(3, 2\), expected \(3, 7\)"):
        drl.matmul(cpu, a, drl.zeros(cpu, (4, 7)), out)


def test_dtype_error(cpu):
    a, b = drl.zeros(cpu, (3, 4)), drl.zeros(cpu, (4, 2), np.float64)
    with pytest.raises(drl.DTypeError, match=r"'b' has dtype float64, expected float32"):
        drl.matmul(cpu, a, b, drl.zeros(cpu, (3, 2)))
    with pytest.raises(drl.DTypeError, match=r"'x' has dtype int64, expected one of float32, float64"):
        drl.relu(cpu, drl.zeros(cpu, 3, np.int64), drl.zeros(cpu, 3, np.int64))
    with pytest.raises(drl.DTypeError, match="not supported"):
        drl.zeros(cpu, 3, np.complex64)


def test_host_devices_share_memory(cpu):
    # Generic, CPU and C arrays all live in host memory: any host device's method accepts them
    g = drl.Generic()
    out = drl.zeros(cpu, (3, 2))
    drl.matmul(cpu, drl.asarray(cpu, np.ones((3, 4)), np.float32), drl.asarray(g, np.ones((4, 2)), np.float32), out)
    np.testing.assert_array_equal(drl.to_numpy(out), np.full((3, 2), 4.0))


def test_mixed_cuda_and_cpu_refused(cpu, cuda_device):
    with pytest.raises(drl.DeviceError, match=r"'x' is on CUDA\(\) \(cuda memory\) but the call is on CPU\(\)"):
        drl.relu(cpu, drl.zeros(cuda_device, 3), drl.zeros(cpu, 3))
    with pytest.raises(drl.DeviceError, match=r"'out' is on CPU\(\) \(host memory\) but the call is on CUDA"):
        drl.relu(cuda_device, drl.zeros(cuda_device, 3), drl.zeros(cpu, 3))


def test_raw_numpy_and_non_device_refused(cpu):
    with pytest.raises(drl.DeviceError, match=r"argument 'a' must be a dispatchrl Array on CPU\(\), got ndarray"):
        drl.matmul(cpu, np.zeros((3, 4), np.float32), drl.zeros(cpu, (4, 2)), drl.zeros(cpu, (3, 2)))
    with pytest.raises(drl.DeviceError, match="argument 'device' must be a dispatchrl Device"):
        drl.relu("cpu", drl.zeros(cpu, 3), drl.zeros(cpu, 3))
    with pytest.raises(drl.DeviceError, match="abstract"):
        drl.Device()


def test_non_contiguous_refused(cpu):
    x = np.zeros((4, 6), np.float32)[:, ::2]
    with pytest.raises(drl.ShapeError, match="C-contiguous"):
        drl.Array(cpu, x)
    assert drl.asarray(cpu, x).data.flags.c_contiguous  # asarray copies into a contiguous buffer


def test_config_errors(cpu):
    p = drl.zeros(cpu, 3)
    t = drl.zeros(cpu, 1, np.int64)
    with pytest.raises(drl.ConfigError, match=r"adam_step: argument 'lr' must be finite and in \(0"):
        drl.adam_step(cpu, p, p, p, p, t, -1.0)
    with pytest.raises(drl.ConfigError, match="'beta1'"):
        drl.adam_step(cpu, p, p, p, p, t, 1e-3, 1.0)
    with pytest.raises(drl.ConfigError, match="'activation' must be one of"):
        drl.dense_forward(
            cpu,
            drl.zeros(cpu, (2, 3)),
            drl.zeros(cpu, (3, 1)),
            drl.zeros(cpu, 1),
            drl.zeros(cpu, (2, 1)),
            drl.zeros(cpu, (2, 1)),
            "sigmoid",
        )
    with pytest.raises(drl.ConfigError, match="'polyak'"):
        drl.polyak_update(cpu, p, p, float("nan"))
    with pytest.raises(drl.ConfigError, match="'seed'"):
        drl.rng(cpu, -1)
    with pytest.raises(drl.ConfigError, match="'sizes'"):
        nn.mlp(cpu, (3,))


def test_nothing_runs_when_a_later_argument_is_bad(cpu):
    """Validation precedes the kernel: outputs are untouched after a refused call."""
    out = drl.asarray(cpu, np.full((3, 2), 7.0, np.float32))
    with pytest.raises(drl.ShapeError):
        drl.dense_forward(
            cpu, drl.zeros(cpu, (3, 4)), drl.zeros(cpu, (4, 2)), drl.zeros(cpu, 2), out, drl.zeros(cpu, (3, 3)), "relu"
        )
    np.testing.assert_array_equal(drl.to_numpy(out), 7.0)


def test_no_method_for_device_is_a_device_error():
    with pytest.raises(drl.DeviceError, match="has no method for device Unsupported"):

        class Unsupported(drl.Device):
            memory = "host"

        dev = Unsupported()
        drl.relu(dev, drl.zeros(dev, 2), drl.zeros(dev, 2))


def test_cuda_without_gpu_is_a_clear_device_error():
    probe = subprocess.run(
        [sys.executable, "-c", "from numba import cuda; print(cuda.is_available())"],
        env=dict(os.environ, NUMBA_ENABLE_CUDASIM="0"),
        capture_output=True,
        text=True,
    )
    if probe.stdout.strip() == "True":
        pytest.skip("a real GPU is present")
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import dispatchrl as drl\ntry:\n    drl.CUDA()\n"
            "except drl.DeviceError as e:\n    print('DeviceError:', e)",
        ],
        env=dict(os.environ, NUMBA_ENABLE_CUDASIM="0"),
        capture_output=True,
        text=True,
    )
    assert "DeviceError: CUDA device requested but no usable NVIDIA GPU" in result.stdout, result.stderr
