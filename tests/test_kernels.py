"""Every core kernel on every device against a float64 numpy reference on random inputs."""

import math
import os
import platform
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import erf

import dispatchrl as drl

ACTIVATION_REF = {
    "identity": (lambda x: x, lambda x: np.ones_like(x)),
    "relu": (lambda x: np.maximum(x, 0), lambda x: (x > 0).astype(float)),
    "tanh": (np.tanh, lambda x: 1 - np.tanh(x) ** 2),
    "gelu": (
        lambda x: 0.5 * x * (1 + erf(x / math.sqrt(2))),
        lambda x: 0.5 * (1 + erf(x / math.sqrt(2))) + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi),
    ),
}
dims = st.integers(1, 6)
seeds = st.integers(0, 2**32 - 1)


def examples(device):
    # The CUDA simulator runs each thread in Python: fewer examples there. Each C example compiles a
    # library: fewer, and derandomized, so after the first run they all come from the disk cache.
    if isinstance(device, drl.C):
        return settings(max_examples=6, derandomize=True, deadline=None)
    return settings(max_examples=4 if isinstance(device, drl.CUDA) else 15, deadline=None)


def put(device, x, dtype=np.float32):
    return drl.asarray(device, np.asarray(x, dtype=dtype))


def close(actual, expected, dtype=np.float32):
    tol = 2e-5 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(drl.to_numpy(actual), expected, rtol=tol * 10, atol=tol * 10)


def test_matmul(device):
    @examples(device)
    @given(dims, dims, dims, seeds, st.sampled_from([np.float32, np.float64]))
    def check(m, k, n, seed, dtype):
        g = np.random.default_rng(seed)
        a, b = g.normal(size=(m, k)), g.normal(size=(k, n))
        out = drl.zeros(device, (m, n), dtype)
        drl.matmul(device, put(device, a, dtype), put(device, b, dtype), out)
        close(out, a.astype(dtype).astype(float) @ b.astype(dtype).astype(float), dtype)

    check()


def test_cuda_products_fit_the_shared_memory_a_launch_gets(cuda_device):
    """A float64 product's staged tiles 32 deep (82 KiB) failed to launch on an H100 with
    CUDA_ERROR_INVALID_VALUE, which the simulator does not enforce: Launch refuses it first."""
    from dispatchrl.backends.cuda import MAX_DYNAMIC_SHARED, Launch
    from dispatchrl.kernels.core.cuda import GRID_STAGE, gemm_shared_bytes, gemm_stage, matmul_kernel

    for dtype in (np.float32, np.float64):
        out = np.zeros(1, dtype)
        assert gemm_stage(dtype) == 128 // out.itemsize
        assert max(gemm_shared_bytes(out, gemm_stage(dtype)), gemm_shared_bytes(out, GRID_STAGE)) <= MAX_DYNAMIC_SHARED
    with pytest.raises(drl.ConfigError, match="dynamic shared memory"):
        Launch(matmul_kernel, (1,), (256,), MAX_DYNAMIC_SHARED + 8)
    # a wide and a narrow float64 product through the grid kernels (tiles, one thread per output)
    g = np.random.default_rng(0)
    for m, k, n in [(70, 40, 66), (70, 40, 3)]:
        a, b = g.normal(size=(m, k)), g.normal(size=(k, n))
        out = drl.zeros(cuda_device, (m, n), np.float64)
        drl.matmul(cuda_device, put(cuda_device, a, np.float64), put(cuda_device, b, np.float64), out)
        close(out, a @ b, np.float64)


@pytest.mark.parametrize("m,k,n", [(100, 64, 64), (37, 33, 17)])
def test_cpu_blas_matmul(m, k, n):
    """Shapes large enough that the CPU method picks the BLAS kernel."""
    g = np.random.default_rng(0)
    a, b = g.normal(size=(m, k)).astype(np.float32), g.normal(size=(k, n)).astype(np.float32)
    out = drl.zeros(drl.CPU(), (m, n))
    drl.matmul(drl.CPU(), put(drl.CPU(), a), put(drl.CPU(), b), out)
    close(out, a.astype(float) @ b.astype(float))


@pytest.mark.parametrize("name", list(ACTIVATION_REF))
def test_activations(device, name):
    @examples(device)
    @given(dims, dims, seeds)
    def check(m, n, seed):
        x = np.random.default_rng(seed).normal(size=(m, n)) * 3
        out = drl.zeros(device, (m, n))
        getattr(drl, name)(device, put(device, x), out)
        close(out, ACTIVATION_REF[name][0](x.astype(np.float32).astype(float)))

    check()


@pytest.mark.parametrize("activation", list(ACTIVATION_REF))
def test_dense_forward_backward(device, activation):
    f, df = ACTIVATION_REF[activation]

    @examples(device)
    @given(dims, dims, dims, seeds, st.booleans())
    def check(batch, n_in, n_out, seed, input_gradient):
        g = np.random.default_rng(seed)
        x, W, b, d_out = (
            g.normal(size=s).astype(np.float32).astype(float)
            for s in ((batch, n_in), (n_in, n_out), (n_out,), (batch, n_out))
        )
        arrays = [put(device, v) for v in (x, W, b)]
        pre, out = drl.zeros(device, (batch, n_out)), drl.zeros(device, (batch, n_out))
        drl.dense_forward(device, *arrays, pre, out, activation)
        ref_pre = x @ W + b
        close(pre, ref_pre)
        close(out, f(ref_pre))
        d_pre, dW, db = (drl.zeros(device, s) for s in ((batch, n_out), (n_in, n_out), (n_out,)))
        d_x = drl.zeros(device, (batch, n_in)) if input_gradient else None
        drl.dense_backward(device, arrays[0], arrays[1], pre, out, put(device, d_out), d_pre, dW, db, d_x, activation)
        ref_d_pre = d_out * df(ref_pre)
        close(d_pre, ref_d_pre)
        close(dW, x.T @ ref_d_pre)
        close(db, ref_d_pre.sum(0))
        if input_gradient:
            close(d_x, ref_d_pre @ W.T)
        # the input half alone leaves parameter gradients untouched
        d_pre2, d_x2 = drl.zeros(device, (batch, n_out)), drl.zeros(device, (batch, n_in))
        drl.fill(device, dW, 7.0)
        drl.dense_input_gradient(device, arrays[1], pre, out, put(device, d_out), d_pre2, d_x2, activation)
        close(d_pre2, ref_d_pre)
        close(d_x2, ref_d_pre @ W.T)
        close(dW, np.full((n_in, n_out), 7.0))

    check()


@pytest.mark.parametrize("batch,n_in,n_out", [(100, 64, 64), (37, 20, 45), (50, 70, 66)])
def test_cpu_blas_dense_input_gradient(batch, n_in, n_out):
    """BLAS-sized layers: d_x goes through a blocked transpose of W, ragged edges included."""
    cpu, g = drl.CPU(), np.random.default_rng(batch)
    x, W, b, d_out = (
        g.normal(size=s).astype(np.float32).astype(float)
        for s in ((batch, n_in), (n_in, n_out), (n_out,), (batch, n_out))
    )
    pre, out = drl.zeros(cpu, (batch, n_out)), drl.zeros(cpu, (batch, n_out))
    drl.dense_forward(cpu, put(cpu, x), put(cpu, W), put(cpu, b), pre, out, "relu")
    ref_d_pre = d_out * (x @ W + b > 0)
    d_pre, dW, db, d_x = (drl.zeros(cpu, s) for s in ((batch, n_out), (n_in, n_out), (n_out,), (batch, n_in)))
    drl.dense_backward(cpu, put(cpu, x), put(cpu, W), pre, out, put(cpu, d_out), d_pre, dW, db, d_x, "relu")
    close(d_x, ref_d_pre @ W.T)
    close(dW, x.T @ ref_d_pre)
    drl.fill(cpu, d_x, 0.0)
    drl.dense_input_gradient(cpu, put(cpu, W), pre, out, put(cpu, d_out), d_pre, d_x, "relu")
    close(d_x, ref_d_pre @ W.T)


@pytest.mark.parametrize("gemm", ["tiled", "blas"])
@pytest.mark.parametrize(
    "batch,n_in,n_out",
    [
        (100, 64, 64),
        (100, 3, 64),
        (100, 4, 64),
        (100, 64, 1),
        (1, 64, 64),
        (37, 20, 45),
        (50, 70, 66),
        (13, 24, 9),
        (2, 40, 32),
    ],
)
def test_cpu_gemm_setting_dense(monkeypatch, gemm, batch, n_in, n_out):
    """Both CPU product kernels (DISPATCHRL_GEMM=tiled|blas) on TD3's layer shapes and ragged ones:
    forward, weight and input gradients against float64."""
    monkeypatch.setenv("DISPATCHRL_GEMM", gemm)
    cpu, g = drl.CPU(), np.random.default_rng(batch * n_in + n_out)
    x, W, b, d_out = (
        g.normal(size=s).astype(np.float32).astype(float)
        for s in ((batch, n_in), (n_in, n_out), (n_out,), (batch, n_out))
    )
    pre, out = drl.zeros(cpu, (batch, n_out)), drl.zeros(cpu, (batch, n_out))
    drl.dense_forward(cpu, put(cpu, x), put(cpu, W), put(cpu, b), pre, out, "tanh")
    ref_pre = x @ W + b
    close(pre, ref_pre)
    ref_d_pre = d_out * (1 - np.tanh(ref_pre) ** 2)
    d_pre, dW, db, d_x = (drl.zeros(cpu, s) for s in ((batch, n_out), (n_in, n_out), (n_out,), (batch, n_in)))
    drl.dense_backward(cpu, put(cpu, x), put(cpu, W), pre, out, put(cpu, d_out), d_pre, dW, db, d_x, "tanh")
    close(dW, x.T @ ref_d_pre)
    close(d_x, ref_d_pre @ W.T)
    drl.dense_backward(cpu, put(cpu, x), put(cpu, W), pre, out, put(cpu, d_out), d_pre, dW, db, None, "tanh")
    close(dW, x.T @ ref_d_pre)
    drl.fill(cpu, d_x, 0.0)
    drl.dense_input_gradient(cpu, put(cpu, W), pre, out, put(cpu, d_out), d_pre, d_x, "tanh")
    close(d_x, ref_d_pre @ W.T)
    c = drl.zeros(cpu, (batch, n_out))
    drl.matmul(cpu, put(cpu, x), put(cpu, W), c)
    close(c, x @ W)


def test_cpu_gemm_setting_is_checked(monkeypatch):
    from dispatchrl.kernels.core.cpu import tiled_gemm

    monkeypatch.setenv("DISPATCHRL_GEMM", "fast")
    with pytest.raises(drl.ConfigError, match="DISPATCHRL_GEMM"):
        tiled_gemm()


@pytest.mark.parametrize("widths, tiled", [({8}, True), ({8, 16}, True), (set(), False)])
def test_cpu_gemm_default_picks_tiles_where_the_target_has_vector_fma(monkeypatch, widths, tiled):
    # the default (auto) takes the tiles where they were measured faster: AVX2 + FMA and AVX-512
    from dispatchrl.kernels.core import cpu as core_cpu

    monkeypatch.delenv("DISPATCHRL_GEMM", raising=False)
    monkeypatch.setattr(core_cpu, "vector_fma_widths", lambda: frozenset(widths))
    assert core_cpu.tiled_gemm() is tiled
    for setting in ("tiled", "blas"):  # explicit settings do not look at the target
        monkeypatch.setenv("DISPATCHRL_GEMM", setting)
        assert core_cpu.tiled_gemm() is (setting == "tiled")


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="x86 CPU names")
@pytest.mark.parametrize("cpu, widths", [("haswell", [8]), ("skylake-avx512", [8, 16]), ("generic", [])])
def test_vector_fma_widths_follow_numbas_target(cpu, widths):
    """The probe reads the target Numba compiles for (NUMBA_CPU_NAME, and NUMBA_CPU_FEATURES
    empty: that CPU's own features), not the host: how an AVX2 machine is emulated."""
    env = {**os.environ, "NUMBA_CPU_NAME": cpu, "NUMBA_CPU_FEATURES": ""}
    code = "from dispatchrl.backends.cpu import vector_fma_widths; print(sorted(vector_fma_widths()))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(widths)


_NN_RUNNERS: dict = {}


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 70), st.integers(1, 70), st.integers(1, 17), st.booleans(), st.sampled_from([0, 1, 2, 3]), seeds)
def test_wide_tiles_give_the_bits_of_the_8_wide_ones(m, k, n8, transposed, epilogue, seed):
    """The <16 x float> NN driver (AVX-512) computes every element as the same FMA chain as the
    <8 x float> one, so the two agree bit for bit (on any x86: LLVM splits what is not native),
    also with the epilogues (0: none, 1: + bias, 2: + bias then ReLU, 3: 0 where a mask is not > 0)."""
    from numba import njit

    from dispatchrl.kernels.core import cpu_gemm

    if not _NN_RUNNERS:
        for name in ("_gemm_nn_raw", "_gemm_nn_wide_raw"):
            raw = getattr(cpu_gemm, name)

            @njit
            def run(a, b, c, bias, mask, epilogue, raw=raw):
                args = (a.ctypes.data, a.strides[0], a.strides[1], b.ctypes.data, b.strides[0], c.ctypes.data,
                        c.strides[0], c.shape[0], c.shape[1], a.shape[1])  # fmt: skip
                if epilogue == 3:
                    raw(*args, 0, 0, mask.ctypes.data, mask.strides[0])
                elif epilogue:
                    raw(*args, bias.ctypes.data, epilogue - 1, 0, 0)
                else:
                    raw(*args, 0, 0, 0, 0)

            _NN_RUNNERS[name] = run
    g = np.random.default_rng(seed)
    n = 8 * n8
    a = g.normal(size=(k, m) if transposed else (m, k)).astype(np.float32)
    a = a.T if transposed else a  # the weight gradient's xᵀ: a column stride that is not 4
    b, bias = g.normal(size=(k, n)).astype(np.float32), g.normal(size=n).astype(np.float32)
    mask = np.maximum(g.normal(size=(m, n)), 0).astype(np.float32)  # a ReLU's output: exact zeros
    narrow, wide = np.full((m, n), np.nan, np.float32), np.full((m, n), np.nan, np.float32)
    _NN_RUNNERS["_gemm_nn_raw"](a, b, narrow, bias, mask, epilogue)
    _NN_RUNNERS["_gemm_nn_wide_raw"](a, b, wide, bias, mask, epilogue)
    np.testing.assert_array_equal(wide, narrow)
    ref = a.astype(float) @ b.astype(float) + (bias if epilogue in (1, 2) else 0)
    ref = np.maximum(ref, 0) if epilogue == 2 else np.where(mask > 0, ref, 0) if epilogue == 3 else ref
    np.testing.assert_allclose(wide, ref, rtol=1e-4, atol=1e-4 * math.sqrt(k))


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 40), st.integers(1, 40), st.integers(1, 70), st.sampled_from(["relu", "identity"]), seeds)
def test_tiled_forward_epilogue_gives_the_bits_of_the_separate_pass(m, k, n, activation, seed):
    """A tiled dense layer with bias and ReLU (or none) in the tiles' stores writes the bits of the
    product followed by the bias/activation pass (the form where the tiles do not fit)."""
    from numba import njit

    from dispatchrl.activation import Activation
    from dispatchrl.kernels.core.cpu import _bias_activate_inplace, dense_forward_inplace_tiled
    from dispatchrl.kernels.core.cpu_gemm import matmul_tiled

    @njit
    def separate(x, W, b, out, code):
        matmul_tiled(x, W, out)
        _bias_activate_inplace(out, b, code)

    g = np.random.default_rng(seed)
    x, W, b = (g.normal(size=s).astype(np.float32) for s in ((m, k), (k, n), (n,)))
    x[g.random(x.shape) < 0.1] = 0  # exact zeros: sums of ±0 and ReLU at 0
    code = int(Activation.of(activation))
    fused, apart = np.full((m, n), np.nan, np.float32), np.full((m, n), np.nan, np.float32)
    dense_forward_inplace_tiled(x, W, b, fused, code)
    separate(x, W, b, apart, code)
    np.testing.assert_array_equal(fused.view(np.int32), apart.view(np.int32))


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 130), st.integers(1, 12), seeds)
def test_relu_backward_column_sums_in_one_pass(m, n8, seed):
    """ReLU's backward with the bias gradient in one pass (float32, 8 | columns): the mask exactly,
    and each column summed in row order from +0, in float32 (numpy's cumsum is sequential)."""
    from numba import njit

    from dispatchrl.kernels.core.cpu_gemm import relu_backward_column_sums

    run = njit(lambda pre, g, d, db: relu_backward_column_sums(pre, g, d, db))
    g = np.random.default_rng(seed)
    n = 8 * n8
    pre, d_out = g.normal(size=(m, n)).astype(np.float32), g.normal(size=(m, n)).astype(np.float32)
    pre[g.random(pre.shape) < 0.1] = 0
    d_pre, db = np.full((m, n), np.nan, np.float32), np.full(n, np.nan, np.float32)
    assert run(pre, d_out, d_pre, db)
    np.testing.assert_array_equal(d_pre, np.where(pre > 0, d_out, np.float32(0)))
    np.testing.assert_array_equal(db, np.cumsum(d_pre, axis=0, dtype=np.float32)[-1])
    np.testing.assert_allclose(db, d_pre.astype(float).sum(axis=0), rtol=1e-4, atol=1e-5 * m)
    assert not run(pre[:, :-1], d_out[:, :-1], d_pre[:, :-1], db[:-1])  # 8 ∤ columns: declined


def _tiled_matmul_runner():
    global _TILED_RUNNER
    if _TILED_RUNNER is None:
        from numba import njit

        from dispatchrl.kernels.core.cpu_gemm import matmul_tiled

        @njit
        def run(a, b, c, kind):
            if kind == 0:
                matmul_tiled(a, b, c)
            elif kind == 1:
                matmul_tiled(a.T, b, c)
            else:
                matmul_tiled(a, b.T, c)

        _TILED_RUNNER = run
    return _TILED_RUNNER


_TILED_RUNNER = None


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 70), st.integers(1, 70), st.integers(1, 70), st.sampled_from(["NN", "TN", "NT"]), seeds)
def test_tiled_matmul_layouts(m, k, n, kind, seed):
    """cpu_gemm.matmul_tiled on any shape and the three layouts of the dense kernels (its NN tiles,
    the tiles on cᵀ, dot products of rows, np.dot where none fits) against float64."""
    from dispatchrl.kernels.core.cpu_gemm import transpose_tiled

    run = _tiled_matmul_runner()
    g = np.random.default_rng(seed)
    a, b = g.normal(size=(m, k)).astype(np.float32), g.normal(size=(k, n)).astype(np.float32)
    ref = a.astype(float) @ b.astype(float)
    c = np.full((m, n), np.nan, np.float32)
    if kind == "NN":
        run(a, b, c, 0)
    elif kind == "TN":
        run(np.ascontiguousarray(a.T), b, c, 1)
    else:
        run(a, np.ascontiguousarray(b.T), c, 2)
    np.testing.assert_allclose(c, ref, rtol=1e-4, atol=1e-4 * math.sqrt(k))
    bt = np.zeros((n, k), np.float32)
    transpose_tiled(b, bt)
    np.testing.assert_array_equal(bt, b.T)


CACHED_TILED_CALLER = """
import sys
import numpy as np
from numba import njit
from dispatchrl.kernels.core import cpu_gemm

@njit(cache=True)
def product(a, b, c):
    cpu_gemm.matmul_tiled(a, b, c)

loaded_at_import = sorted(cpu_gemm._COMPILED)
g = np.random.default_rng(int(sys.argv[1]))
a, b = g.normal(size=(37, 24)).astype(np.float32), g.normal(size=(24, 40)).astype(np.float32)
c = np.full((37, 40), np.nan, np.float32)
product(a, b, c)
error = float(np.abs(c - a.astype(np.float64) @ b.astype(np.float64)).max())
print(loaded_at_import, sorted(cpu_gemm._COMPILED), len(product.stats.cache_hits), error)
"""


def test_tiled_drivers_load_on_first_call_from_cached_code(tmp_path):
    """Importing compiles no tiled driver; a caller loaded from Numba's disk cache in a fresh
    process (no staging ran, so nothing loaded the drivers) reaches them through the first-call
    entry of their pointer cells and computes the product."""
    import os
    import subprocess
    import sys

    script = tmp_path / "cached_tiled_caller.py"
    script.write_text(CACHED_TILED_CALLER)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    runs = []
    for seed in (1, 2):  # the first compiles and writes the cache, the second loads it
        out = subprocess.run([sys.executable, str(script), str(seed)], env=env, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        runs.append(out.stdout.split("]"))
    drivers = "['dispatchrl_gemm_dot', 'dispatchrl_gemm_nn', 'dispatchrl_transpose'"
    for (at_import, after, rest), cached in zip(runs, (False, True), strict=True):
        assert at_import == "[" and after.strip() == drivers
        hits, error = rest.split()
        assert (int(hits) > 0) == cached
        assert float(error) < 1e-4


def test_host_arrays_are_cache_line_aligned():
    for device in (drl.CPU(), drl.Generic()):
        for shape, dtype in (((100, 64), np.float32), ((3,), np.int64), ((7, 5), np.float64)):
            a = drl.zeros(device, shape, dtype)
            b = drl.asarray(device, np.arange(np.prod(shape)).reshape(shape).astype(dtype))
            for arr in (a, b):
                assert arr.data.ctypes.data % 64 == 0 and arr.data.flags.c_contiguous and arr.data.flags.writeable
            np.testing.assert_array_equal(b.data, np.arange(np.prod(shape)).reshape(shape).astype(dtype))


def test_device_twin_refuses_cpu_jitted_callees():
    """A CUDA twin whose callee still resolves to a CPU dispatcher would only fail on a real GPU."""
    from dispatchrl.backends.cuda import device_twin
    from dispatchrl.envs.acrobot import cpu as env_cpu
    from dispatchrl.envs.acrobot import cuda as env_cuda

    with pytest.raises(TypeError, match="acrobot_dsdt"):
        device_twin(env_cpu.acrobot_rk4, wrap_angle=env_cuda.twins["wrap_angle"])
    assert env_cuda.twins["acrobot_rk4"].py_func.__globals__["acrobot_dsdt"] is env_cuda.twins["acrobot_dsdt"]
    # a Numba intrinsic (here a CPU-only branch-free select) must be rebound as well
    from dispatchrl.kernels.replay import cpu as replay_cpu
    from dispatchrl.kernels.replay import cuda as replay_cuda

    with pytest.raises(TypeError, match="select_float"):
        device_twin(replay_cpu.set_leaf)
    assert replay_cuda.set_leaf.py_func.__globals__["select_float"] is replay_cuda.select_float


def test_mse(device):
    @examples(device)
    @given(dims, dims, seeds)
    def check(m, n, seed):
        g = np.random.default_rng(seed)
        pred, target = g.normal(size=(m, n)).astype(np.float32), g.normal(size=(m, n)).astype(np.float32)
        loss, grad = drl.zeros(device, 1), drl.zeros(device, (m, n))
        drl.mse_loss(device, put(device, pred), put(device, target), loss)
        drl.mse_gradient(device, put(device, pred), put(device, target), grad)
        diff = pred.astype(float) - target
        close(loss, [np.mean(diff**2)])
        close(grad, 2 * diff / diff.size)

    check()


def test_adam_step(device):
    @examples(device)
    @given(dims, dims, seeds, st.floats(1e-4, 1e-1))
    def check(m, n, seed, lr):
        g = np.random.default_rng(seed)
        p = g.normal(size=(m, n))
        arrays = [put(device, p)] + [drl.zeros(device, (m, n)) for _ in range(3)]
        t = drl.zeros(device, 1, np.int64)
        ref_p, ref_m, ref_v = p.astype(np.float32).astype(float), np.zeros((m, n)), np.zeros((m, n))
        for step in range(1, 4):
            grad = g.normal(size=(m, n)).astype(np.float32).astype(float)
            drl.assign(arrays[1], grad)
            drl.adam_step(device, *arrays, t, lr, 0.9, 0.999, 1e-8)
            ref_m = 0.9 * ref_m + 0.1 * grad
            ref_v = 0.999 * ref_v + 0.001 * grad**2
            ref_p = ref_p - lr * (ref_m / (1 - 0.9**step)) / (np.sqrt(ref_v / (1 - 0.999**step)) + 1e-8)
        close(arrays[0], ref_p)
        close(arrays[2], ref_m)
        assert drl.to_numpy(t)[0] == 3

    check()


def adam_arrays(device, p) -> tuple:
    """adam_step's param (from ``p``), grad, m and v (zeros) and its step counter t."""
    shape = np.shape(p)
    zeros = [drl.zeros(device, shape) for _ in range(3)]
    return put(device, p), *zeros, drl.zeros(device, 1, np.int64)


def test_adam_step_with_an_array_learning_rate_matches_the_number(device):
    """adam_step's lr may be a (1,) float64 Array (PPO adapts it inside the fused step): plum
    picks that method on the argument's type; it must update exactly as the number would."""
    g = np.random.default_rng(5)
    p, grads = g.normal(size=(3, 17)), g.normal(size=(4, 3, 17))
    results = []
    for lr in (3e-2, drl.asarray(device, np.array([3e-2]))):
        param, grad, m, v, t = adam_arrays(device, p)
        for step_grad in grads:
            drl.assign(grad, step_grad)
            drl.adam_step(device, param, grad, m, v, t, lr, 0.9, 0.999, 1e-8)
        results.append((drl.to_numpy(param), drl.to_numpy(v)))
    (p_number, v_number), (p_array, v_array) = results
    assert not np.allclose(p_number, p.astype(np.float32))  # it moved
    np.testing.assert_allclose(p_array, p_number, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(v_array, v_number, rtol=1e-6, atol=1e-9)


def test_weight_decay_then_adam_is_rltools_decaying_adam(device):
    """RLtools' Adam with weight decay λ (nn/optimizers/adam/instance/operations_generic.h):
    w -= lr·m̂/(√v̂ + ε) + w·λ/2, the decay decoupled from the moments and not scaled by lr.
    weight_decay_step(λ/2) then adam_step must follow that float64 reference."""
    g = np.random.default_rng(11)
    p, grads = g.normal(size=(3, 17)).astype(np.float32), g.normal(size=(4, 3, 17)).astype(np.float32)
    lr, wd = 3e-2, 0.1
    param, grad, m, v, t = adam_arrays(device, p)
    ref_p, ref_m, ref_v = p.astype(float), np.zeros((3, 17)), np.zeros((3, 17))
    for step, step_grad in enumerate(grads.astype(float), start=1):
        drl.assign(grad, step_grad)
        drl.weight_decay_step(device, param, wd / 2)
        drl.adam_step(device, param, grad, m, v, t, lr, 0.9, 0.999, 1e-8)
        ref_m = 0.9 * ref_m + 0.1 * step_grad
        ref_v = 0.999 * ref_v + 0.001 * step_grad**2
        adam = lr * (ref_m / (1 - 0.9**step)) / (np.sqrt(ref_v / (1 - 0.999**step)) + 1e-8)
        ref_p = ref_p - (adam + ref_p * wd / 2)
    close(param, ref_p)
    close(m, ref_m)
    assert drl.to_numpy(t)[0] == 4
    with pytest.raises(drl.ConfigError, match="decay"):
        drl.weight_decay_step(device, param, -0.1)


def test_gradient_norm_clipping_is_torch_clip_grad_norm(device):
    """accumulate_squared_norm over several arrays, then clip_by_norm each, against torch's
    clip_grad_norm_ in float64: the joint norm, each array scaled by max_norm / (norm + 1e-6)
    where that is below 1, left alone otherwise."""

    @examples(device)
    @given(dims, dims, seeds, st.sampled_from([np.float32, np.float64]), st.floats(0.05, 20.0))
    def check(m, n, seed, dtype, max_norm):
        g = np.random.default_rng(seed)
        xs = [g.normal(size=(m, n)).astype(dtype), g.normal(size=n).astype(dtype)]
        arrays = [put(device, x, dtype) for x in xs]
        total = drl.asarray(device, np.array([0.5]))  # accumulates onto what is there
        for a in arrays:
            drl.accumulate_squared_norm(device, a, total)
        squared = 0.5 + sum(float(np.sum(x.astype(float) ** 2)) for x in xs)
        np.testing.assert_allclose(drl.to_numpy(total), [squared], rtol=1e-12)
        factor = min(max_norm / (math.sqrt(squared) + 1e-6), 1.0)
        for a, x in zip(arrays, xs):
            drl.clip_by_norm(device, a, total, max_norm)
            close(a, x.astype(float) * factor, dtype)
            if factor == 1.0:
                np.testing.assert_array_equal(drl.to_numpy(a), x)

    check()
    with pytest.raises(drl.ConfigError, match="max_norm"):
        drl.clip_by_norm(device, drl.zeros(device, 2), drl.zeros(device, 1, np.float64), 0.0)
    with pytest.raises(drl.DTypeError, match="'total'"):
        drl.accumulate_squared_norm(device, drl.zeros(device, 2), drl.zeros(device, 1))


def test_linear_schedule_anneals_then_holds(device):
    counter, out = drl.zeros(device, 1, np.int64), drl.zeros(device, 1, np.float64)
    for count, expected in [(0, 1e-3), (3, 1e-3 + (2e-4 - 1e-3) * 3 / 8), (8, 2e-4), (20, 2e-4)]:
        drl.assign(counter, np.array([count]))
        drl.linear_schedule(device, counter, 8, 1e-3, 2e-4, out)
        assert drl.to_numpy(out)[0] == pytest.approx(expected, rel=1e-15)
    with pytest.raises(drl.ConfigError, match="total"):
        drl.linear_schedule(device, counter, 0, 1e-3, 0.0, out)


def test_polyak_fill_copy(device):
    @examples(device)
    @given(dims, dims, seeds, st.floats(0, 1))
    def check(m, n, seed, polyak):
        g = np.random.default_rng(seed)
        target, source = g.normal(size=(m, n)).astype(np.float32), g.normal(size=(m, n)).astype(np.float32)
        t = put(device, target)
        drl.polyak_update(device, t, put(device, source), polyak)
        close(t, polyak * target.astype(float) + (1 - polyak) * source)
        drl.fill(device, t, 1.5)
        close(t, np.full((m, n), 1.5))
        drl.copy(device, put(device, source), t)
        close(t, source)

    check()


def test_random_streams_agree_across_devices(device):
    reference = []
    for dev in (drl.Generic(), device):
        stream = drl.rng(dev, 1234)
        u, z = drl.zeros(dev, (3, 5)), drl.zeros(dev, (7,), np.float64)
        drl.random_uniform(dev, stream, u, -2.0, 3.0)
        drl.random_normal(dev, stream, z, 1.0, 0.5)
        reference.append((drl.to_numpy(u), drl.to_numpy(z), drl.to_numpy(stream)))
    (u0, z0, s0), (u1, z1, s1) = reference
    np.testing.assert_allclose(u1, u0, rtol=1e-6)
    np.testing.assert_allclose(z1, z0, rtol=1e-12)
    np.testing.assert_array_equal(s1, s0)
    assert s0[1] == 15 + 14  # uniform consumes one position per value, normal two
    assert u0.min() >= -2 and u0.max() < 3


def test_random_statistics():
    cpu = drl.CPU()
    stream = drl.rng(cpu, 7)
    z, u = drl.zeros(cpu, 20000, np.float64), drl.zeros(cpu, 20000, np.float64)
    drl.random_normal(cpu, stream, z)
    drl.random_uniform(cpu, stream, u)
    z, u = drl.to_numpy(z), drl.to_numpy(u)
    assert abs(z.mean()) < 0.05 and abs(z.std() - 1) < 0.05
    assert abs(u.mean() - 0.5) < 0.02 and 0 <= u.min() and u.max() < 1
    # different seeds give different streams
    other = drl.zeros(cpu, 20000, np.float64)
    drl.random_normal(cpu, drl.rng(cpu, 8), other)
    assert np.abs(drl.to_numpy(other) - z).max() > 1


def test_normal_quantile_is_acklams_on_cpu_and_generic_and_draws_normals():
    from statistics import NormalDist

    from dispatchrl.kernels.random import cpu as random_cpu
    from dispatchrl.kernels.random import generic as random_generic

    # the whole range the stream helper feeds it (2**-53 .. 1 - 2**-53), the region edges, both tails
    low = 0.02425
    p = np.concatenate(
        [np.linspace(2**-53, 1 - 2**-53, 4001), [2**-53, 1e-10, low, np.nextafter(low, 0), 1 - low, 0.5]]
    )
    want = np.array([NormalDist().inv_cdf(x) for x in p])  # Wichura's AS241, ~1e-16
    got = np.array([random_cpu.normal_quantile(x) for x in p])
    np.testing.assert_allclose(got, want, rtol=1.2e-9, atol=1e-15)  # Acklam's bound: 1.15e-9
    np.testing.assert_array_equal(random_generic.normal_quantile(p), got)  # the same operations
    z = np.array([random_cpu.standard_normal_icdf(np.uint64(99), np.uint64(c)) for c in range(20000)])
    assert abs(z.mean()) < 0.03 and abs(z.std() - 1) < 0.02 and z.min() < -3.3 and z.max() > 3.3


@settings(max_examples=25, deadline=None)
@given(
    st.integers(1, 130),
    st.lists(st.sampled_from([8, 16, 24, 64, 5]), min_size=1, max_size=3),
    st.sampled_from(["relu", "tanh", "gelu"]),
    st.sampled_from(["identity", "tanh"]),
    st.sampled_from([(True, None), (True, True), (True, False), (False, True)]),
    seeds,
)
def test_cpu_mlp_backward_with_fused_relu_masks_gives_the_bits_of_the_generic_one(
    batch, hidden, activation, output_activation, modes, seed
):
    """The CPU's MLP backward (each hidden ReLU's derivative in the stores of the input gradient
    of the layer above, its own backward only summing the bias gradient) writes the gradients
    and the input gradient of the per-layer mlp_backward, bit for bit, and they match float64."""
    cpu, g = drl.CPU(), np.random.default_rng(seed)
    parameters, input_gradient = modes
    sizes = (int(g.integers(1, 9)), *hidden, int(g.integers(1, 4)))
    nets = [drl.nn.mlp(cpu, sizes, activation, output_activation, seed=seed % 1000) for _ in range(2)]
    buffers = [drl.nn.make_buffers(cpu, net, batch, input_gradient=True) for net in nets]
    x = put(cpu, g.normal(size=(batch, sizes[0])))
    d_output = put(cpu, g.normal(size=(batch, sizes[-1])))
    for net, buf in zip(nets, buffers, strict=True):
        drl.nn.forward(cpu, net, buf, x)
    from dispatchrl.nn.mlp import layers_backward

    drl.nn.backward(cpu, nets[0], buffers[0], x, d_output, parameters, input_gradient)  # the CPU method
    generic = layers_backward.function.invoke(*(object,) * 7)  # layer by layer, as on every other device
    generic(cpu, nets[1], buffers[1], x, d_output, parameters, input_gradient)

    def bits(a):
        return np.asarray(drl.to_numpy(a)).view(np.int32)

    written = [p.grad for p in nets[0].parameters()] if parameters else []
    reference = [p.grad for p in nets[1].parameters()] if parameters else []
    if not parameters or input_gradient:
        written.append(buffers[0].d_in[0])
        reference.append(buffers[1].d_in[0])
    for a, b in zip(written, reference, strict=True):
        np.testing.assert_array_equal(bits(a), bits(b))
    if not parameters or input_gradient:  # and against float64, through the input gradient
        act, d_act = ACTIVATION_REF[activation]
        out_act, d_out_act = ACTIVATION_REF[output_activation]
        h, pres = drl.to_numpy(x).astype(float), []
        for i, (w, b) in enumerate(zip(nets[0].weights, nets[0].biases)):
            pres.append(h @ drl.to_numpy(w.value).astype(float) + drl.to_numpy(b.value))
            h = (out_act if i == len(nets[0].weights) - 1 else act)(pres[-1])
        d = drl.to_numpy(d_output).astype(float)
        for i in reversed(range(len(pres))):
            d = d * (d_out_act if i == len(pres) - 1 else d_act)(pres[i])
            d = d @ drl.to_numpy(nets[0].weights[i].value).astype(float).T
        np.testing.assert_allclose(drl.to_numpy(buffers[0].d_in[0]), d, rtol=2e-3, atol=2e-4)
