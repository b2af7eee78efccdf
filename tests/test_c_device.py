"""What only the C device has: restrict-qualified aliasing, every dtype, random streams equal to
the Generic ones bit for bit, one C function per fused step, the MLP training step against CPU,
borrowed host methods, the compiler and its cache. The core kernels against float64 references
run on C with every other device (the ``device`` fixture, tests/test_kernels.py)."""

import numpy as np
import pytest
from testkit import borrowed_host_function

import dispatchrl as drl
from dispatchrl.backends.c import compiler as c_compiler
from dispatchrl.kernels.core import api as core_api
from dispatchrl.kernels.random import api as random_api
from dispatchrl.nn import mlp, mlp_buffers, mlp_train_step

C, REF = drl.C(), drl.Generic()


def on_both(fn, host, dtype=np.float32):
    """Run ``fn(device, *arrays)`` on C (floats as ``dtype``) and on the float64 reference; return
    every array afterwards from both (inputs too: kernels must not write them)."""
    results = []
    for device, dt in ((C, dtype), (REF, np.float64)):
        arrays = [None if h is None else drl.asarray(device, h, dt if h.dtype.kind == "f" else None) for h in host]
        fn(device, *arrays)
        results.append([None if a is None else drl.to_numpy(a) for a in arrays])
    return results


def assert_close(results, tol=2e-5):
    for got, want in zip(*results):
        if got is not None:
            scale = max(1.0, float(np.abs(want).max()))
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale)


def normal(seed, *shape):
    return np.random.default_rng(seed).normal(size=shape)


def test_every_core_generic_function_has_a_c_method():
    core = [fn for fn in drl.GENERIC_FUNCTIONS if fn.__module__ in (core_api.__name__, random_api.__name__)]
    missing = [fn.__name__ for fn in core if not any(m.signature.types[0] is drl.C for m in fn.function.methods)]
    assert len(core) >= 16 and not missing


def test_activation_in_place():  # x is out: the kernel must not claim restrict
    x = normal(0, 5, 7)
    got, want = on_both(lambda d, a: drl.tanh(d, a, a), [x])
    assert_close(([got[0]], [want[0]]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.uint64, np.bool_])
def test_fill_and_copy_every_dtype(dtype):
    src = (np.arange(12).reshape(3, 4) % 5).astype(dtype)
    got, want = on_both(
        lambda d, s, o: (drl.copy(d, s, o), drl.fill(d, s, 3)), [src, np.zeros((3, 4), dtype)], dtype=dtype
    )
    for g, w in zip(got, want):
        assert g.dtype == np.dtype(dtype) and np.array_equal(g, w)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", ["uniform", "normal"])
def test_random_streams_match_generic_exactly(kind, dtype):
    results = []
    for device in (C, REF):
        stream, out = drl.rng(device, 7), drl.zeros(device, (33, 5), dtype)
        fn = drl.random_uniform if kind == "uniform" else drl.random_normal
        fn(device, stream, out, -1.5, 2.5)
        fn(device, stream, out, -1.5, 2.5)  # the counter advanced: a fresh draw
        results.append((drl.to_numpy(stream), drl.to_numpy(out)))
    assert np.array_equal(results[0][0], results[1][0])
    if kind == "uniform":
        np.testing.assert_array_equal(results[0][1], results[1][1])
    else:  # Box-Muller's log and cos are the C device's own (backends/c/mathlib.py), within 1 ulp of libm's
        eps = np.finfo(dtype).eps  # a few ulp of the draw before mean + std * z (which may cancel)
        np.testing.assert_allclose(results[0][1], results[1][1], rtol=8 * eps, atol=8 * eps * 2.5)


def test_fused_step_is_one_c_function_and_runs_n_times():
    x, y = drl.asarray(C, normal(1, 4, 3).astype(np.float32)), drl.zeros(C, (4, 3))

    def double_then_relu(device):
        drl.polyak_update(device, x, x, 0.5)  # x ← x (aliased arguments)
        drl.relu(device, x, y)
        drl.polyak_update(device, y, x, 0.0)  # y ← x

    step = drl.fuse(C, double_then_relu)
    assert step._run.source.count("void dispatchrl_step(") == 1
    assert "static void" in step._run.source and "enum { SIZE = 12 }" in step._run.source
    step(3)
    np.testing.assert_allclose(drl.to_numpy(y), drl.to_numpy(x))


def test_mlp_train_step_fused_on_c_equals_cpu():
    params, losses = {}, {}
    for device in (drl.CPU(), C):
        net = mlp(device, (5, 32, 32, 3), "relu", "tanh", seed=4)
        buffers = mlp_buffers(device, net, 16)
        x = drl.asarray(device, normal(0, 16, 5).astype(np.float32))
        y = drl.asarray(device, (0.5 * normal(1, 16, 3)).astype(np.float32))
        loss = drl.zeros(device, 1)
        step = drl.fuse(device, mlp_train_step, net, buffers, x, y, loss, 1e-3)
        step(5)
        params[type(device)] = [drl.to_numpy(p.value) for p in net.parameters()]
        losses[type(device)] = drl.to_numpy(loss)[0]
    # Adam normalises each gradient, so a few steps keep the two within float32 noise
    for got, want in zip(params[drl.C], params[drl.CPU]):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert losses[drl.C] == pytest.approx(losses[drl.CPU], rel=1e-4)


def test_host_method_borrowed_between_c_segments():
    halve = borrowed_host_function(_halve_kernel)
    x, out = drl.asarray(C, np.arange(6, dtype=np.float32)), drl.zeros(C, 6)

    def step_fn(device):
        drl.fill(device, out, 1.0)
        halve(device, x)
        drl.polyak_update(device, out, x, 0.0)

    step = drl.fuse(C, step_fn)
    step(2)
    np.testing.assert_allclose(drl.to_numpy(out), np.arange(6) / 4)


def _halve_kernel(x):
    x *= 0.5


def test_compiled_libraries_are_cached_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("DISPATCHRL_CACHE_DIR", str(tmp_path))
    source = "void dispatchrl_step(long n, void *const *a) { (void)n; (void)a; }\n"
    first = c_compiler.compile_shared(source)
    stamp = first.stat().st_mtime_ns
    assert c_compiler.compile_shared(source) == first and first.stat().st_mtime_ns == stamp
    assert first.with_suffix(".c").read_text() == source


def test_missing_compiler_names_what_to_install(monkeypatch):
    c_compiler.host_compiler.cache_clear()
    monkeypatch.setenv("CC", "no-such-cc-dispatchrl")
    try:
        with pytest.raises(drl.DeviceError, match="apt-get install gcc"):
            c_compiler.host_compiler()
    finally:
        monkeypatch.delenv("CC")
        c_compiler.host_compiler.cache_clear()


def test_bad_input_refused_before_compiling():
    with pytest.raises(drl.ShapeError, match="'b'"):
        drl.matmul(C, drl.zeros(C, (2, 3)), drl.zeros(C, (4, 2)), drl.zeros(C, (2, 2)))
    with pytest.raises(drl.DeviceError, match="'x'"):  # CUDA memory (a CPU array is host memory, accepted)
        drl.relu(C, drl.zeros(drl.CUDA(), 3), drl.zeros(C, 3))


def test_increment():
    got, want = on_both(lambda d, c: (drl.increment(d, c), drl.increment(d, c, -3)), [np.array([5], np.int64)])
    assert got[0][0] == want[0][0] == 3


def test_every_on_policy_generic_function_has_its_own_c_method():
    from dispatchrl.kernels.onpolicy import api as onpolicy_api

    functions = [fn for fn in drl.GENERIC_FUNCTIONS if fn.__module__ == onpolicy_api.__name__]
    own = {
        fn.__name__
        for fn in functions
        for m in fn.function.methods
        if m.signature.types[0] is drl.C and m.signature.precedence >= 0  # borrowed: precedence -1
    }
    assert len(functions) >= 11 and own == {fn.__name__ for fn in functions}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "rows, n_in, n_out", [(100, 64, 64), (1, 3, 64), (7, 5, 19), (13, 17, 33), (9, 64, 1), (33, 32, 3)]
)
def test_blocked_products_sum_in_order(rows, n_in, n_out, dtype):
    # the register-tiled products give the bits of one sequential sum per element, in order:
    # numpy's elementwise float ops round each product and sum as C does
    g = np.random.default_rng(rows * n_in + n_out)
    x, W, b, d_out = (g.normal(size=s).astype(dtype) for s in ((rows, n_in), (n_in, n_out), n_out, (rows, n_out)))
    arrays = [drl.asarray(C, v) for v in (x, W, b, d_out)]
    pre, out, d_pre, dW, db, d_x, prod = (
        drl.zeros(C, s, dtype) for s in ((rows, n_out),) * 3 + ((n_in, n_out), n_out, (rows, n_in), (rows, n_out))
    )
    drl.dense_forward(C, arrays[0], arrays[1], arrays[2], pre, out, "identity")
    drl.matmul(C, arrays[0], arrays[1], prod)
    core_api.dense_backward(C, arrays[0], arrays[1], pre, out, arrays[3], d_pre, dW, db, d_x, "identity")
    want_pre, want_prod = b.copy(), np.zeros((rows, n_out), dtype)
    for p in range(n_in):
        want_pre = want_pre + x[:, p : p + 1] * W[p]
        want_prod = want_prod + x[:, p : p + 1] * W[p]
    want_dW = np.zeros((n_in, n_out), dtype)
    for i in range(rows):
        want_dW = want_dW + x[i][:, None] * d_out[i][None, :]
    want_dx = np.zeros((rows, n_in), dtype)
    for j in range(n_out):
        want_dx = want_dx + d_out[:, j : j + 1] * W[:, j]
    for got, want in ((pre, want_pre), (prod, want_prod), (dW, want_dW), (d_x, want_dx)):
        assert np.array_equal(drl.to_numpy(got), want)
