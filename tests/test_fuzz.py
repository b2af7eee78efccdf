"""Property tests (hypothesis) of every generic kernel family on every device (issue 21, item 7).

Each test draws shapes (1, odd sizes, sizes that are not a multiple of a SIMD width), dtypes and
values (ordinary, large magnitudes, denormals, zeros, mixtures), runs the kernel on Generic, CPU,
C and the CUDA simulator, and compares with a float64 numpy reference written here, independently
of the library's Generic methods, within a stated error bound. ``test_bad_arguments`` checks that
every bad shape, dtype, device or number is refused with the documented dispatchrl error before
any kernel runs, leaving every argument untouched.

Error bounds are first-order rounding-error bounds in the unit roundoff ``u`` of the dtype
(2⁻²⁴ for float32, 2⁻⁵³ for float64; plus 2⁻⁵³ for the float64 reference's own rounding): a sum of K products is within (K + 2)·u·Σ|products| of
the exact sum in any summation order (Higham, Accuracy and Stability, §3.1), an elementwise
expression of a few operations within a few u of its magnitude. A device that flushes denormals
to zero (none now: the C device keeps them so every target gives the same bits, see
backends/c/render.py FLUSH_DENORMALS) would read a denormal input as 0 and make a denormal result
0; the bounds keep a ``TINY`` (the smallest normal) term for that, and :func:`flushes` says where.

Profiles (tests/conftest.py): ``default`` runs a few examples per family and device for CI;
``--hypothesis-profile=thorough`` runs ≥ 200 per family and device. Shapes on C are drawn from
a small set and so are the numbers C bakes into its source (each distinct one is a compiled
shared library, cached on disk); CUDA-simulator shapes stay within one or two blocks of threads.
"""

import functools
import math
import platform

import numba
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.special import erf

import dispatchrl as drl

# --- everything called other than through `drl.`: imported here only (module moves are one edit) ---
from dispatchrl.data import TensorDict, episode_log, obs_stats, replay_buffer, transitions
from dispatchrl.envs import AcrobotContinuous, Pendulum, env_state, env_step
from dispatchrl.errors import ConfigError, DeviceError, DTypeError, ShapeError
from dispatchrl.kernels.offpolicy.api import (
    LOG_STD_MAX,
    LOG_STD_MIN,
    add_clipped_noise,
    concat_columns,
    entropy_temperature_gradient,
    gaussian_tanh_backward,
    gaussian_tanh_sample,
    replay_add,
    replay_sample,
    select_min_rows,
    slice_columns,
    soft_td_target,
    td_target,
    track_episodes,
)
from dispatchrl.kernels.onpolicy import (
    discounted_returns,
    gae,
    gaussian_log_prob,
    normalize_observations,
    random_permutation,
    running_stats_update,
)
from dispatchrl.kernels.random.api import uniform_top

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
FLOAT_DTYPES = (F32, F64)
#: unit roundoff of the kernel's dtype plus that of the float64 reference (which rounds too: for
#: float64 kernels its errors are of the same order as the kernel's)
U = {F32: 2.0**-24 + 2.0**-53, F64: 2.0**-53 + 2.0**-53}
#: smallest normal number: the scale of what flushing denormals changes
TINY = {F32: float(np.finfo(np.float32).tiny), F64: float(np.finfo(np.float64).tiny)}
#: largest magnitude drawn: products of two such values, summed over a few dozen terms, stay finite
LARGE = {F32: 1e15, F64: 1e150}
X86 = platform.machine().lower() in ("x86_64", "amd64")

DEVICE_NAMES = ["generic", "cpu", "c", "cuda"]
DEVICES = {name: drl.devices.device_from_name(name) for name in DEVICE_NAMES}
devices = pytest.mark.parametrize("name", DEVICE_NAMES)

ACTIVATIONS = ["identity", "relu", "tanh", "gelu"]
SQRT_2PI = math.sqrt(2 * math.pi)

#: our own statement of the activations and their derivatives in float64 (v = pre, y = out)
ACT = {
    "identity": lambda v: v,
    "relu": lambda v: np.maximum(v, 0.0),
    "tanh": np.tanh,
    "gelu": lambda v: 0.5 * v * (1 + erf(v / math.sqrt(2))),
}
DACT = {
    "identity": lambda v, y: np.ones_like(v),
    "relu": lambda v, y: (v > 0).astype(float),
    "tanh": lambda v, y: 1 - y * y,
    "gelu": lambda v, y: 0.5 * (1 + erf(v / math.sqrt(2))) + v * np.exp(-0.5 * v * v) / SQRT_2PI,
}
#: sup |activation'|: how an error in pre carries into out (GELU's derivative peaks at 1.129)
LIPSCHITZ = {"identity": 1.0, "relu": 1.0, "tanh": 1.0, "gelu": 1.13}


def fuzz(test):
    """``test(name, data)`` as a pytest test of the device ``name``, running hypothesis over
    st.data() with the active profile's number of examples."""

    @functools.wraps(test)
    def run(name):
        def check(data):
            test(name, data)

        # hypothesis keys its example database on the source of `check` (the same for every
        # test here) plus this digest
        check.__qualname__ = check.__name__ = f"{test.__name__}_{name}"
        check._hypothesis_internal_add_digest = check.__name__.encode()
        checked = settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])(check)
        given(data=st.data())(checked)()

    del run.__wrapped__  # pytest reads the signature (name) of run, not test's (name, data)
    return run


# --- drawing shapes, numbers and arrays ---------------------------------------------------------


def is_c(device):
    return isinstance(device, drl.C)


def is_cuda(device):
    return isinstance(device, drl.CUDA)


def flushes(device):
    return False  # the C device keeps denormals (IEEE default) on every target


def dim(data, device, label, big=40):
    """A size: on C one of three (each shape is a compiled library), on the CUDA simulator a
    small one (it runs every thread in Python), elsewhere 1, odd sizes, SIMD-width neighbours
    and anything up to ``big``."""
    if is_c(device):
        return data.draw(st.sampled_from((1, 3, 17)), label=label)
    if is_cuda(device):
        return data.draw(st.sampled_from((1, 2, 3, 5, 7, 8, 9)), label=label)
    return data.draw(
        st.one_of(st.sampled_from((1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33)), st.integers(1, big)), label=label
    )


def number(data, device, label, strategy, c_choices):
    """A scalar argument: C bakes it into its source, so there it comes from ``c_choices``."""
    if is_c(device):
        return data.draw(st.sampled_from(c_choices), label=label)
    return data.draw(strategy, label=label)


def dtype_of(data, label="dtype"):
    return data.draw(st.sampled_from(FLOAT_DTYPES), label=label)


MIXES = ("normal", "large", "denormal", "mixed", "special", "integers")


def values(data, shape, dtype, label, large=None, mixes=MIXES):
    """Host float array of ``shape``: hypothesis picks the mixture and a seed, numpy fills it.

    normal: N(0, s²) with s from 1e-3 to 1e3; large: ±10^[0, log10(large)]; denormal: below the
    smallest normal (and zeros); mixed: each element from any of them; special: 0, -0, ±1,
    ±smallest normal, ±smallest denormal, ±large; integers: small integers (exact sums)."""
    dtype = np.dtype(dtype)
    large = LARGE[dtype] if large is None else large
    mix = data.draw(st.sampled_from(mixes), label=f"{label} mix")
    g = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label=f"{label} seed"))
    tiny = TINY[dtype]
    size = int(np.prod(shape))

    def one(kind, n):
        sign = g.choice([-1.0, 1.0], n)
        if kind == "normal":
            return g.normal(size=n) * 10.0 ** g.uniform(-3, 3)
        if kind == "large":
            return sign * 10.0 ** g.uniform(0, math.log10(large), n)
        if kind == "denormal":
            return sign * tiny * g.uniform(0, 1, n) * (g.random(n) < 0.9)
        if kind == "special":
            smallest = float(np.finfo(dtype).smallest_subnormal)
            return g.choice([0.0, -0.0, 1.0, -1.0, tiny, -tiny, smallest, -smallest, large, -large], n)
        return g.integers(-3, 4, n).astype(float)

    if mix == "mixed":
        kinds = g.choice(["normal", "large", "denormal", "special", "integers"], size)
        flat = np.empty(size)
        for kind in set(kinds):
            flat[kinds == kind] = one(kind, int((kinds == kind).sum()))
    else:
        flat = one(mix, size)
    return flat.reshape(shape).astype(dtype)


def put(device, x, dtype=None):
    return drl.asarray(device, np.asarray(x) if dtype is None else np.asarray(x, dtype=dtype))


def host(x):
    return drl.to_numpy(x)


def f64(x):
    return np.asarray(x, dtype=np.float64)


def read(device, x):
    """``x`` (host, its own dtype) as the device reads it, in float64: denormals are 0 where the
    device flushes them."""
    x = np.asarray(x)
    out = f64(x)
    if flushes(device) and x.dtype.kind == "f":
        out = np.where(np.abs(out) < TINY[x.dtype], 0.0, out)
    return out


def assert_within(what, actual, expected, bound):
    """|actual − expected| ≤ bound elementwise (equal infinities and zeros of either sign pass)."""
    actual, expected = f64(actual), f64(expected)
    bound = np.broadcast_to(f64(bound), expected.shape)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape}, expected {expected.shape}"
    with np.errstate(invalid="ignore"):
        ok = (np.abs(actual - expected) <= bound) | (actual == expected)
    if not ok.all():
        i = tuple(int(k) for k in np.argwhere(~ok)[0])
        raise AssertionError(
            f"{what}: {int((~ok).sum())} of {ok.size} elements off, first at {i}: got "
            f"{actual[i]!r}, expected {expected[i]!r} ± {bound[i]!r}"
        )


# --- dense layers and matrix products -----------------------------------------------------------


def product_bound(a, b, dtype, k):
    """Bound on |fl(a @ b) − a @ b| for float64 copies a (m, k), b (k, n) of the device's inputs:
    (k + 2)·u·(|a| @ |b|) for the rounding (any summation order, FMA or not) plus, for a device
    that flushes, a denormal read as 0 changes a product by ≤ TINY·|other factor| and each flushed
    product or partial sum by ≤ TINY."""
    rounding = (k + 2) * U[dtype] * (np.abs(a) @ np.abs(b))
    flush = TINY[dtype] * (np.abs(a).sum(1)[:, None] + np.abs(b).sum(0)[None, :] + 2 * k + 2)
    return rounding + flush


@devices
@fuzz
def test_matmul(name, data):
    device, dtype = DEVICES[name], dtype_of(data)
    m, k, n = (dim(data, device, s) for s in "mkn")
    a, b = values(data, (m, k), dtype, "a"), values(data, (k, n), dtype, "b")
    out = drl.zeros(device, (m, n), dtype)
    drl.matmul(device, put(device, a), put(device, b), out)
    assert_within("out", host(out), f64(a) @ f64(b), product_bound(f64(a), f64(b), dtype, k))


@devices
@fuzz
def test_activation_functions(name, data):
    device, dtype = DEVICES[name], dtype_of(data)
    activation = data.draw(st.sampled_from(ACTIVATIONS), label="activation")
    shape = (dim(data, device, "m"), dim(data, device, "n"))
    x = values(data, shape, dtype, "x")
    out = drl.zeros(device, shape, dtype)
    getattr(drl, activation)(device, put(device, x), out)
    expected = ACT[activation](read(device, x))
    # tanh: a few-ulp rational approximation on CPU float32; GELU: 1 + erf cancels for negative
    # inputs, an absolute error of a few u·|x|: 8·u·(|x| + |out|) covers both
    bound = 8 * U[dtype] * (np.abs(f64(x)) + np.abs(expected)) + 2 * TINY[dtype]
    assert_within(activation, host(out), expected, bound)


def dense_case(name, data):
    """A dense layer's case on device ``name``: (device, dtype, activation, batch, n_in, n_out, x,
    W), drawn in that order."""
    device, dtype = DEVICES[name], dtype_of(data)
    activation = data.draw(st.sampled_from(ACTIVATIONS), label="activation")
    batch, n_in, n_out = (dim(data, device, s) for s in ("batch", "n_in", "n_out"))
    x, W = values(data, (batch, n_in), dtype, "x"), values(data, (n_in, n_out), dtype, "W")
    return device, dtype, activation, batch, n_in, n_out, x, W


@devices
@fuzz
def test_dense_forward(name, data):
    device, dtype, activation, batch, n_in, n_out, x, W = dense_case(name, data)
    b = values(data, (n_out,), dtype, "b")
    pre, out = drl.zeros(device, (batch, n_out), dtype), drl.zeros(device, (batch, n_out), dtype)
    drl.dense_forward(device, put(device, x), put(device, W), put(device, b), pre, out, activation)
    # the bias is one more term of the sum: x @ W + b = [x, 1] @ [W; b]
    xa = np.hstack([f64(x), np.ones((batch, 1))])
    Wb = np.vstack([f64(W), f64(b)[None, :]])
    ref_pre = xa @ Wb
    pre_bound = product_bound(xa, Wb, dtype, n_in + 1)
    assert_within("pre", host(pre), ref_pre, pre_bound)
    ref_out = ACT[activation](ref_pre)
    # out = activation(pre): pre's error times sup|activation'|, plus the activation's own
    # evaluation error (see test_activation_functions)
    out_bound = LIPSCHITZ[activation] * pre_bound + 8 * U[dtype] * (np.abs(ref_pre) + np.abs(ref_out)) + 2 * TINY[dtype]
    assert_within("out", host(out), ref_out, out_bound)


def backward_inputs(data, device, dtype, activation, batch, n_out):
    """pre, out = activation(pre) (rounded to dtype, as a forward pass leaves them) and d_out."""
    pre = values(data, (batch, n_out), dtype, "pre")
    out = ACT[activation](f64(pre)).astype(dtype)
    return pre, out, values(data, (batch, n_out), dtype, "d_out")


def d_pre_reference(device, dtype, activation, pre, out, d_out):
    """d_pre = d_out · activation'(pre, out) in float64, and its bound: the derivative evaluates
    to within a few u absolutely (1 − y², erf and exp terms all O(1)), the product adds u."""
    v = read(device, pre)  # ReLU's derivative reads a denormal pre as 0 where the device flushes
    deriv = DACT[activation](v, f64(out))
    expected = f64(d_out) * deriv
    bound = 8 * U[dtype] * np.abs(f64(d_out)) * (1 + np.abs(deriv)) + 4 * TINY[dtype] * (1 + np.abs(f64(d_out)))
    return expected, bound


def assert_d_pre(device, dtype, activation, pre, out, d_out, d_pre):
    """The kernel's d_pre against d_pre_reference; returns the reference and its bound."""
    expected, bound = d_pre_reference(device, dtype, activation, pre, out, d_out)
    assert_within("d_pre", host(d_pre), expected, bound)
    return expected, bound


def assert_d_x(d_x, W, g, d_pre_bound, dtype, n_out):
    """The kernel's input gradient d_x = g·Wᵀ, g the reference d_pre (bounded by d_pre_bound)."""
    d_x_bound = product_bound(g, f64(W).T, dtype, n_out) + d_pre_bound @ np.abs(f64(W)).T
    assert_within("d_x", host(d_x), g @ f64(W).T, d_x_bound)


@devices
@fuzz
def test_dense_backward(name, data):
    device, dtype, activation, batch, n_in, n_out, x, W = dense_case(name, data)
    pre, out, d_out = backward_inputs(data, device, dtype, activation, batch, n_out)
    with_d_x = data.draw(st.booleans(), label="d_x")
    d_pre, dW, db = (drl.zeros(device, s, dtype) for s in ((batch, n_out), (n_in, n_out), (n_out,)))
    d_x = drl.zeros(device, (batch, n_in), dtype) if with_d_x else None
    drl.dense_backward(
        device,
        put(device, x),
        put(device, W),
        put(device, pre),
        put(device, out),
        put(device, d_out),
        d_pre,
        dW,
        db,
        d_x,
        activation,
    )
    # the parameter and input gradients are sums over the kernel's d_pre (which may be
    # recomputed per thread: its error bound carries through the sums)
    g, d_pre_bound = assert_d_pre(device, dtype, activation, pre, out, d_out, d_pre)
    dW_bound = product_bound(f64(x).T, g, dtype, batch) + np.abs(f64(x)).T @ d_pre_bound
    assert_within("dW", host(dW), f64(x).T @ g, dW_bound)
    ones = np.ones((1, batch))
    db_bound = product_bound(ones, g, dtype, batch)[0] + d_pre_bound.sum(0)
    assert_within("db", host(db), g.sum(0), db_bound)
    if with_d_x:
        assert_d_x(d_x, W, g, d_pre_bound, dtype, n_out)


@devices
@fuzz
def test_dense_input_gradient(name, data):
    device, dtype = DEVICES[name], dtype_of(data)
    activation = data.draw(st.sampled_from(ACTIVATIONS), label="activation")
    batch, n_in, n_out = (dim(data, device, s) for s in ("batch", "n_in", "n_out"))
    W = values(data, (n_in, n_out), dtype, "W")
    pre, out, d_out = backward_inputs(data, device, dtype, activation, batch, n_out)
    d_pre, d_x = drl.zeros(device, (batch, n_out), dtype), drl.zeros(device, (batch, n_in), dtype)
    drl.dense_input_gradient(
        device, put(device, W), put(device, pre), put(device, out), put(device, d_out), d_pre, d_x, activation
    )
    g, d_pre_bound = assert_d_pre(device, dtype, activation, pre, out, d_out, d_pre)
    assert_d_x(d_x, W, g, d_pre_bound, dtype, n_out)


# --- losses and optimisers ----------------------------------------------------------------------


@devices
@fuzz
def test_mse_loss_and_gradient(name, data):
    device, dtype = DEVICES[name], dtype_of(data)
    shape = (dim(data, device, "m"), dim(data, device, "n"))
    # squares of 1e15 summed over 1600 elements stay below float32's 3.4e38
    pred, target = values(data, shape, dtype, "pred"), values(data, shape, dtype, "target")
    loss, grad = drl.zeros(device, 1, dtype), drl.zeros(device, shape, dtype)
    drl.mse_loss(device, put(device, pred), put(device, target), loss)
    drl.mse_gradient(device, put(device, pred), put(device, target), grad)
    diff = f64(pred) - f64(target)
    size = diff.size
    ref_loss = np.mean(diff * diff)
    # a difference (rounded in dtype at worst), squared, summed over `size` terms, divided,
    # rounded to dtype: (size + 6)·u relative to the mean square
    loss_bound = (size + 6) * U[dtype] * ref_loss + 4 * TINY[dtype] * (np.abs(diff).mean() + 1)
    assert_within("loss", host(loss), [ref_loss], [loss_bound])
    # 2·diff/size: the difference, the product and the final rounding
    assert_within("d_pred", host(grad), 2 * diff / size, 4 * U[dtype] * np.abs(2 * diff / size) + 4 * TINY[dtype])


@devices
@fuzz
def test_adam_step(name, data):
    device, dtype = DEVICES[name], dtype_of(data)
    shape = (dim(data, device, "m"), dim(data, device, "n"))
    lr = number(data, device, "lr", st.floats(1e-6, 1.0), (1e-3, 0.3))
    beta1 = number(data, device, "beta1", st.floats(0.0, 0.999), (0.9, 0.0))
    beta2 = number(data, device, "beta2", st.floats(0.0, 0.9999), (0.999, 0.5))
    eps = number(data, device, "eps", st.floats(1e-8, 1e-2), (1e-8, 1e-3))
    param, grad, m = (values(data, shape, dtype, s) for s in ("param", "grad", "m"))
    v = np.abs(values(data, shape, dtype, "v"))  # a second moment is never negative
    # Adam's second moment holds squares of gradients, so v below LARGE² keeps v + g² finite
    steps = data.draw(st.integers(0, 10_000), label="t")
    arrays = [put(device, a) for a in (param, grad, m, v)]
    t = put(device, [steps], np.int64)
    drl.adam_step(device, *arrays, t, lr, beta1, beta2, eps)
    assert host(t).tolist() == [steps + 1]
    g, m0, v0 = read(device, grad), read(device, m), read(device, v)
    tn = steps + 1
    ref_m = beta1 * m0 + (1 - beta1) * g
    ref_v = beta2 * v0 + (1 - beta2) * g * g
    scale1, scale2 = 1 / (1 - beta1**tn), 1 / (1 - beta2**tn)
    denominator = np.sqrt(ref_v * scale2) + eps
    update = lr * ref_m * scale1 / denominator
    ref_p = read(device, param) - update
    u = U[dtype]
    # m, v: two products and a sum, 4u of the terms' magnitudes; β is rounded to dtype, and 1 − β
    # is either rounded from double (CPU) or computed as 1 − (T)β (C: off by up to u·β, which is
    # 1000·u relative to 1 − β for β = 0.999), an absolute u on the coefficient of g (of g²). A
    # subnormal β rounds to dtype with an absolute error (up to TINY·u), not a relative one, so
    # β·m₀ (β·v₀) carries TINY·|m₀| (TINY·|v₀|) more
    m_bound = 4 * u * (np.abs(beta1 * m0) + np.abs((1 - beta1) * g)) + u * np.abs(g) + TINY[dtype] * (4 + np.abs(m0))
    v_bound = 4 * u * (np.abs(beta2 * v0) + (1 - beta2) * g * g) + u * g * g + TINY[dtype] * (4 + v0)
    assert_within("m", host(arrays[2]), ref_m, m_bound)
    assert_within("v", host(arrays[3]), ref_v, v_bound)
    # the step: m's and v's errors (relative to m̂ and, halved through the square root, to the
    # denominator), ~12 roundings of the expression, and the bias corrections 1 − βᵗ computed in
    # float64 by pow or repeated products (≤ t + 2 roundings of βᵗ, amplified by the
    # cancellation βᵗ / (1 − βᵗ)); then the subtraction from param
    corrections = (tn + 2) * U[F64] * (beta1**tn * scale1 + 0.5 * beta2**tn * scale2)
    rel = (
        m_bound / np.maximum(np.abs(ref_m), TINY[dtype]) * (np.abs(ref_m) > 0)
        + 12 * u
        + corrections
        + 0.5 * v_bound * scale2 / np.maximum(denominator * np.sqrt(ref_v * scale2 + TINY[dtype]), TINY[dtype])
    )
    p_bound = (
        u * np.abs(ref_p)
        + np.abs(update) * rel
        + lr * scale1 * m_bound / denominator
        + 4 * TINY[dtype] * (1 + lr * scale1 / eps)
    )
    assert_within("param", host(arrays[0]), ref_p, p_bound)


@devices
@fuzz
def test_polyak_update(name, data):
    device, dtype = DEVICES[name], dtype_of(data)
    shape = (dim(data, device, "m"), dim(data, device, "n"))
    polyak = number(data, device, "polyak", st.floats(0.0, 1.0), (0.0, 0.5, 0.995, 1.0))
    target, source = values(data, shape, dtype, "target"), values(data, shape, dtype, "source")
    t = put(device, target)
    drl.polyak_update(device, t, put(device, source), polyak)
    t0, s0 = read(device, target), read(device, source)
    # two products and a sum, rounded to dtype (polyak itself rounded to dtype in T arithmetic).
    # The bound scales with |target| + |source|, not |polyak·target| + |(1 − polyak)·source|: the
    # CPU kernel is compiled with fastmath, which may reassociate to polyak·(target − source) +
    # source (so polyak = 1 moves target by an ulp of source)
    assert_within(
        "target", host(t), polyak * t0 + (1 - polyak) * s0, 4 * U[dtype] * (np.abs(t0) + np.abs(s0)) + 4 * TINY[dtype]
    )


ALL_DTYPES = (np.float32, np.float64, np.int32, np.int64, np.uint64, np.bool_)


@devices
@fuzz
def test_fill_copy_increment(name, data):
    device = DEVICES[name]
    dtype = np.dtype(data.draw(st.sampled_from(ALL_DTYPES), label="dtype"))
    shape = (dim(data, device, "m"), dim(data, device, "n"))
    if dtype.kind == "f":
        value = number(
            data,
            device,
            "value",
            st.floats(-float(np.finfo(dtype).max), float(np.finfo(dtype).max), width=dtype.itemsize * 8),
            (0.0, -1.5, 1e-40, 3e38),
        )
        expected = np.array(value, dtype=dtype)
    elif dtype.kind == "b":
        value = number(data, device, "value", st.sampled_from((0.0, 1.0, -2.0, 0.5)), (0.0, 1.0))
        expected = np.array(bool(value))
    else:
        # integers exactly representable as the float the declaration converts them to
        info = np.iinfo(dtype)
        value = number(
            data,
            device,
            "value",
            st.integers(max(int(info.min), -(2**53)), min(int(info.max), 2**53)),
            (0, -7, 2**31 - 1),
        )
        value = float(value) if dtype != np.uint64 else float(abs(value))
        expected = np.array(value).astype(dtype)
    out = drl.zeros(device, shape, dtype)
    drl.fill(device, out, value)
    np.testing.assert_array_equal(host(out), np.full(shape, expected), err_msg=f"fill {value!r}")
    # copy: bit for bit (floats compared as integers: -0.0, denormals and NaN payloads kept)
    if dtype.kind == "f":
        src = values(data, shape, dtype, "src")
        src.reshape(-1)[:1] = np.nan if data.draw(st.booleans(), label="nan") else src.reshape(-1)[:1]
    else:
        src = (
            np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
            .integers(0, 2**62, shape)
            .astype(dtype)
        )
    dst = drl.zeros(device, shape, dtype)
    drl.copy(device, put(device, src), dst)
    view = {1: np.uint8, 4: np.uint32, 8: np.uint64}[dtype.itemsize]
    np.testing.assert_array_equal(host(dst).view(view), src.view(view), err_msg="copy")
    start = data.draw(st.integers(-(2**40), 2**40), label="counter")
    amount = number(data, device, "amount", st.integers(-(2**40), 2**40), (1, -3, 2**40))
    counter = put(device, [start], np.int64)
    drl.increment(device, counter, amount)
    drl.increment(device, counter)
    assert host(counter).tolist() == [start + amount + 1]


# --- random streams -----------------------------------------------------------------------------

GOLDEN, MIX1, MIX2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
MASK = 2**64 - 1


def uniform01(key, counter, count):
    """Our statement of the stream: sample i is SplitMix64(key + (counter + i + 1)·golden) >> 11
    scaled by 2⁻⁵³ (exact in float64)."""
    with np.errstate(over="ignore"):
        i = np.arange(count, dtype=np.uint64) + np.uint64(counter) + np.uint64(1)
        z = np.uint64(key) + i * np.uint64(GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(MIX1)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(MIX2)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * 2.0**-53


def normal01(key, counter, count):
    """Box–Muller over stream positions 2i (radius) and 2i + 1 (angle)."""
    u = uniform01(key, counter, 2 * count)
    return np.sqrt(-2.0 * np.log(1.0 - u[0::2])) * np.cos(2.0 * math.pi * u[1::2])


def rng_state(data, device, label="rng"):
    """A stream: from drl.rng(seed), or any (key, counter) pair (every state is a valid one)."""
    if data.draw(st.booleans(), label=f"{label} from seed"):
        state = host(drl.rng(device, data.draw(st.integers(0, 2**63 - 1), label=f"{label} seed")))
        return int(state[0]), int(state[1])
    return (
        data.draw(st.integers(0, MASK), label=f"{label} key"),
        data.draw(st.integers(0, 2**62), label=f"{label} counter"),
    )


#: normal samples: float64 libm sin/cos/log/sqrt differ by a few ulp between numpy, Numba, C and
#: CUDA; relative 16 u64 of the radius-scaled magnitude (the radius is ≤ 8.6 for 53-bit uniforms)
NORMAL_ATOL = 16 * U[F64] * 9


@devices
@fuzz
def test_random_uniform_and_normal_streams(name, data):
    device, dtype = DEVICES[name], dtype_of(data)
    shape = (dim(data, device, "m"), dim(data, device, "n"))
    key, counter = rng_state(data, device)
    low = number(data, device, "low", st.floats(-1e6, 1e6), (-2.0, 0.0))
    high = number(data, device, "high", st.floats(low, low + 1e6), (3.0, 1.0))
    mean = number(data, device, "mean", st.floats(-1e3, 1e3), (0.0, 1.0))
    std = number(data, device, "std", st.floats(0.0, 1e3), (1.0, 0.5))
    stream = put(device, np.array([key, counter], np.uint64))
    u, z = drl.zeros(device, shape, dtype), drl.zeros(device, shape, dtype)
    drl.random_uniform(device, stream, u, low, high)
    drl.random_normal(device, stream, z, mean, std)
    size = int(np.prod(shape))
    # uniform consumes one stream position per value, normal two
    assert host(stream).tolist() == [key, (counter + 3 * size) & MASK]
    ref_u = (low + (high - low) * uniform01(key, counter, size)).reshape(shape)
    # a draw that rounds up to high in dtype is clamped to the largest dtype value below it
    ref_u = np.minimum(ref_u.astype(dtype), dtype.type(uniform_top(dtype, low, high)))
    # computed in double, rounded once to dtype: exact in float64 (same operations), except that a
    # real GPU contracts low + (high - low) * u into one FMA (the product's rounding is skipped)
    if dtype == F32:
        bound = U[dtype] * np.abs(ref_u) + TINY[dtype]
    elif isinstance(device, drl.CUDA) and not numba.config.ENABLE_CUDASIM:
        bound = np.spacing(abs(high - low)) + np.spacing(np.abs(ref_u))
    else:
        bound = 0.0
    assert_within("uniform", host(u), ref_u, bound)
    got = host(u)
    # within [low, high), half-open as documented (test_random_uniform_stays_below_high pins the
    # draw that used to round up to high), compared in float64; a range holding no dtype value
    # gives low rounded to dtype
    first = dtype.type(low)
    first = first if float(first) >= low else np.nextafter(first, dtype.type(np.inf))
    got = got.astype(np.float64)
    if float(first) < high:
        assert (got >= float(dtype.type(low))).all() and (got < high).all()
    else:
        assert (got == float(dtype.type(low))).all()
    ref_z = (mean + std * normal01(key, (counter + size) & MASK, size)).reshape(shape)
    bound = U[dtype] * np.abs(ref_z) + NORMAL_ATOL * (abs(mean) + std) + TINY[dtype]
    assert_within("normal", host(z), ref_z, bound)


@devices
@fuzz
def test_random_moments(name, data):
    """Sample moments within 6 standard errors of the distribution's (a false alarm about once in
    10⁸ draws per check)."""
    device, dtype = DEVICES[name], dtype_of(data)
    n = {drl.C: 4099, drl.CUDA: 255}.get(type(device), data.draw(st.integers(2000, 8000), label="n"))
    key, counter = rng_state(data, device)
    low = number(data, device, "low", st.floats(-100, 100), (-2.0,))
    high = low + number(data, device, "width", st.floats(1e-3, 100), (5.0,))
    mean = number(data, device, "mean", st.floats(-100, 100), (1.0,))
    std = number(data, device, "std", st.floats(1e-3, 100), (0.5,))
    stream = put(device, np.array([key, counter], np.uint64))
    u, z = drl.zeros(device, n, np.float64), drl.zeros(device, n, dtype)
    drl.random_uniform(device, stream, u, low, high)
    drl.random_normal(device, stream, z, mean, std)
    u, z = host(u), f64(host(z))
    width = high - low
    assert (u >= low).all() and (u < high).all()
    assert abs(u.mean() - (low + high) / 2) <= 6 * width / math.sqrt(12 * n)
    # the sample variance's standard error: width²/√(180 n) for a uniform (fourth central moment
    # width⁴/80), std²·√(2/n) for a normal
    assert abs(u.var() - width**2 / 12) <= 6 * width**2 / math.sqrt(180 * n)
    assert abs(z.mean() - mean) <= 6 * std / math.sqrt(n)
    assert abs(z.var() - std**2) <= 6 * std**2 * math.sqrt(2 / n)


def _unshift(z, s):
    """Inverse of z ^ (z >> s) on 64 bits."""
    x = z
    for _ in range(64 // s + 1):
        x = z ^ (x >> s)
    return x & MASK


def key_whose_first_uniform_is(target_bits):
    """The key whose stream (counter 0) starts with SplitMix64 output ``target_bits`` (the hash
    is a bijection: invert its xorshifts and odd multiplications)."""
    z = _unshift(target_bits, 31)
    z = (z * pow(MIX2, -1, 2**64)) & MASK
    z = _unshift(z, 27)
    z = (z * pow(MIX1, -1, 2**64)) & MASK
    z = _unshift(z, 30)
    return (z - GOLDEN) & MASK


@devices
@pytest.mark.parametrize(
    "dtype,low,high",
    [(np.float32, 0.0, 1.0), (np.float64, 824856.3424141656, 824856.3424141657)],
    ids=["float32-unit", "float64-narrow"],
)
def test_random_uniform_stays_below_high(name, dtype, low, high):
    device = DEVICES[name]
    key = key_whose_first_uniform_is(MASK)  # u = 1 - 2⁻⁵³, the largest uniform the stream makes
    assert uniform01(key, 0, 1)[0] == 1 - 2.0**-53
    out = drl.zeros(device, 1, dtype)
    drl.random_uniform(device, put(device, np.array([key, 0], np.uint64)), out, low, high)
    assert host(out)[0] < high


# --- replay buffers and the off-policy ops ------------------------------------------------------


def transition_rows(data, n, obs_dim, action_dim, dtype, label):
    return (
        values(data, (n, obs_dim), dtype, f"{label} obs"),
        values(data, (n, action_dim), dtype, f"{label} action"),
        values(data, (n,), dtype, f"{label} reward"),
        values(data, (n, obs_dim), dtype, f"{label} next_obs"),
        data.draw(st.lists(st.booleans(), min_size=n, max_size=n), label=f"{label} terminated"),
        data.draw(st.lists(st.booleans(), min_size=n, max_size=n), label=f"{label} truncated"),
    )


FIELDS = ("obs", "action", "reward", "next_obs", "terminated", "truncated")


def bits(x):
    x = np.asarray(x)
    return x.view({1: np.uint8, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize])


@devices
@fuzz
def test_replay_add_and_sample(name, data):
    device, dtype = DEVICES[name], dtype_of(data)
    capacity = dim(data, device, "capacity", big=64)
    obs_dim, action_dim = dim(data, device, "obs_dim", big=9), dim(data, device, "action_dim", big=5)
    buffer = replay_buffer(device, capacity, obs_dim, action_dim, dtype)
    model = {
        f: np.zeros((capacity,) + np.shape(host(getattr(buffer, f)))[1:], host(getattr(buffer, f)).dtype)
        for f in FIELDS
    }
    position = size = 0
    for k in range(data.draw(st.integers(1, 4), label="adds")):
        n = data.draw(st.integers(1, capacity), label=f"rows {k}")
        if is_c(device):
            n = data.draw(st.sampled_from(sorted({1, capacity})), label=f"rows {k} on C")
        rows = transition_rows(data, n, obs_dim, action_dim, dtype, f"add {k}")
        replay_add(device, buffer, *(put(device, r, np.bool_ if isinstance(r, list) else None) for r in rows))
        for f, r in zip(FIELDS, rows):
            model[f][(position + np.arange(n)) % capacity] = r
        position, size = (position + n) % capacity, min(size + n, capacity)
        assert (host(buffer.position)[0], host(buffer.size)[0]) == (position, size)
        for f in FIELDS:  # stored bit for bit, wrapped at capacity
            np.testing.assert_array_equal(bits(host(getattr(buffer, f))), bits(model[f]), err_msg=f)
    batch_rows = dim(data, device, "batch", big=64)
    batch = transitions(device, batch_rows, obs_dim, action_dim, dtype)
    key, counter = rng_state(data, device)
    stream = put(device, np.array([key, counter], np.uint64))
    replay_sample(device, stream, buffer, batch)
    rows = (uniform01(key, counter, batch_rows) * size).astype(np.int64)  # uniform over the filled rows
    assert host(stream).tolist() == [key, (counter + batch_rows) & MASK]
    for f in FIELDS:
        np.testing.assert_array_equal(bits(host(getattr(batch, f))), bits(model[f][rows]), err_msg=f)


@devices
@fuzz
def test_concat_and_slice_columns(name, data):
    device, dtype = DEVICES[name], dtype_of(data)
    rows, ca, cb = (dim(data, device, s) for s in ("rows", "a cols", "b cols"))
    a, b = values(data, (rows, ca), dtype, "a"), values(data, (rows, cb), dtype, "b")
    out = drl.zeros(device, (rows, ca + cb), dtype)
    concat_columns(device, put(device, a), put(device, b), out)
    np.testing.assert_array_equal(bits(host(out)), bits(np.hstack([a, b])))
    width = data.draw(st.integers(1, ca + cb), label="width")
    start = data.draw(st.integers(0, ca + cb - width), label="start")
    if is_c(device):
        width, start = data.draw(st.sampled_from(((cb, ca), (ca, 0))), label="slice on C")
    part = drl.zeros(device, (rows, width), dtype)
    slice_columns(device, out, start, part)
    np.testing.assert_array_equal(bits(host(part)), bits(np.hstack([a, b])[:, start : start + width]))


@devices
@fuzz
def test_td_targets(name, data):
    device, dtype = DEVICES[name], dtype_of(data)
    n = dim(data, device, "n", big=64)
    gamma = number(data, device, "gamma", st.floats(0.0, 1.0), (0.99, 0.0, 1.0))
    reward = values(data, (n,), dtype, "reward")
    q1, q2 = values(data, (n, 1), dtype, "q1"), values(data, (n, 1), dtype, "q2")
    terminated = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n), label="terminated"))
    target = drl.zeros(device, (n, 1), dtype)
    td_target(device, put(device, reward), put(device, terminated), put(device, q1), put(device, q2), gamma, target)
    q = np.minimum(read(device, q1), read(device, q2))[:, 0]
    r, alive = read(device, reward), gamma * (1.0 - terminated)
    # reward + γ·(1 − terminated)·min: two products, a sum, gamma rounded to dtype
    assert_within(
        "target", host(target)[:, 0], r + alive * q, 4 * U[dtype] * (np.abs(r) + np.abs(alive * q)) + 4 * TINY[dtype]
    )
    # SAC's soft target subtracts α·log_prob inside the bootstrap
    log_prob = values(data, (n, 1), dtype, "log_prob", large=1e6 if dtype == F32 else 1e100)
    log_alpha = number(data, device, "log_alpha", st.floats(-10.0, 3.0), (-0.5, 0.0))
    soft_td_target(
        device,
        put(device, reward),
        put(device, terminated),
        put(device, q1),
        put(device, q2),
        put(device, log_prob),
        put(device, [log_alpha], dtype),
        gamma,
        target,
    )
    alpha = math.exp(float(np.asarray(log_alpha, dtype)))
    entropy = alpha * read(device, log_prob)[:, 0]
    soft = q - entropy
    bound = 6 * U[dtype] * (np.abs(r) + alive * (np.abs(q) + np.abs(entropy))) + 8 * TINY[dtype]
    assert_within("soft target", host(target)[:, 0], r + alive * soft, bound)


@devices
@fuzz
def test_select_min_rows(name, data):
    device, dtype = DEVICES[name], dtype_of(data)
    rows, cols = dim(data, device, "rows"), dim(data, device, "cols")
    a, b = values(data, (rows, 1), dtype, "a"), values(data, (rows, 1), dtype, "b")
    if data.draw(st.booleans(), label="ties"):
        b[::2] = a[::2]  # a <= b on ties: the first argument wins
    x, y = values(data, (rows, cols), dtype, "x"), values(data, (rows, cols), dtype, "y")
    out = drl.zeros(device, (rows, cols), dtype)
    select_min_rows(device, *(put(device, v) for v in (a, b, x, y)), out)
    expected = np.where(read(device, a) <= read(device, b), x, y)
    np.testing.assert_array_equal(bits(host(out)), bits(expected))


@devices
@fuzz
def test_add_clipped_noise(name, data):
    device, dtype = DEVICES[name], dtype_of(data)
    shape = (dim(data, device, "m"), dim(data, device, "n"))
    std = number(data, device, "std", st.floats(0.0, 10.0), (0.1, 0.8))
    noise_clip = number(data, device, "noise_clip", st.one_of(st.none(), st.floats(0.0, 10.0)), (0.5, None))
    low = number(data, device, "low", st.floats(-10.0, 10.0), (-1.0,))
    high = number(data, device, "high", st.floats(low, low + 20.0), (1.0,))
    x = values(data, shape, dtype, "x", large=1e6)
    key, counter = rng_state(data, device)
    arr = put(device, x)
    add_clipped_noise(device, put(device, np.array([key, counter], np.uint64)), arr, std, noise_clip, low, high)
    clip = np.inf if noise_clip is None else noise_clip
    noise = np.clip(std * normal01(key, counter, x.size).reshape(shape), -clip, clip)
    expected = np.clip(read(device, x) + noise, low, high)
    got = f64(host(arr))
    # the sum rounded to dtype (u of |x| + |noise|) and the normal's libm differences; the clip
    # to [low, high] is exact up to rounding low and high to dtype
    bound = 2 * U[dtype] * (np.abs(f64(x)) + np.abs(noise) + abs(low) + abs(high)) + NORMAL_ATOL * std + TINY[dtype]
    assert_within("x", got, expected, bound)
    assert (got >= np.asarray(low, dtype)).all() and (got <= np.asarray(high, dtype)).all()


@devices
@fuzz
def test_gaussian_tanh_sample(name, data):
    """SAC's head: action = tanh(mean + exp(clamp(log_std))·ε), its log-density with the tanh
    correction; ε the stream's normals."""
    device, dtype = DEVICES[name], dtype_of(data)
    batch, a_dim = dim(data, device, "batch"), dim(data, device, "action_dim", big=8)
    actor_out = values(data, (batch, 2 * a_dim), dtype, "actor_out", large=1e6)
    key, counter = rng_state(data, device)
    noise, action = drl.zeros(device, (batch, a_dim), dtype), drl.zeros(device, (batch, a_dim), dtype)
    log_prob = drl.zeros(device, (batch, 1), dtype)
    gaussian_tanh_sample(
        device, put(device, np.array([key, counter], np.uint64)), put(device, actor_out), noise, action, log_prob
    )
    eps = normal01(key, counter, batch * a_dim).reshape(batch, a_dim)
    u = U[dtype]
    assert_within("noise", host(noise), eps, u * np.abs(eps) + NORMAL_ATOL)
    mean = read(device, actor_out[:, :a_dim])
    log_std = np.clip(read(device, actor_out[:, a_dim:]), LOG_STD_MIN, LOG_STD_MAX)
    pre = mean + np.exp(log_std) * eps
    a = np.tanh(pre)
    # pre: a product and a sum in (at worst) dtype; tanh: contracts errors, adds a few ulp
    pre_bound = 4 * u * (np.abs(mean) + np.abs(np.exp(log_std) * eps)) + NORMAL_ATOL * np.exp(log_std)
    a_bound = np.minimum(pre_bound, 2.0) + 8 * u
    assert_within("action", host(action), a, a_bound)
    # log(1 − a² + 1e-6) amplifies an error in a by 2|a| / (1 − a² + 1e-6)
    sensitivity = 2 * np.abs(a) / (1 - a * a + 1e-6)
    terms = -0.5 * eps * eps - log_std - 0.5 * math.log(2 * math.pi) - np.log(1 - a * a + 1e-6)
    lp_bound = (
        8 * u * (np.abs(terms) + 0.5 * eps * eps + np.abs(log_std) + 2)
        + sensitivity * a_bound
        + np.abs(eps) * NORMAL_ATOL
    ).sum(1)
    assert_within("log_prob", host(log_prob)[:, 0], terms.sum(1), lp_bound)


@devices
@fuzz
def test_gaussian_tanh_backward(name, data):
    """The reparameterised gradient of mean_b(α·log_prob − Q) w.r.t. [mean, log_std], as
    documented: d_u = d_action·(1 − a²) + (α/B)·2a(1 − a²)/(1 − a² + 1e-6); d_mean = d_u;
    d_log_std = d_u·std·ε − α/B inside the log-std clamp, 0 outside."""
    device, dtype = DEVICES[name], dtype_of(data)
    batch, a_dim = dim(data, device, "batch"), dim(data, device, "action_dim", big=8)
    actor_out = values(data, (batch, 2 * a_dim), dtype, "actor_out", large=1e6)
    noise = values(data, (batch, a_dim), dtype, "noise", mixes=("normal", "integers", "special"), large=8.0)
    action = np.tanh(values(data, (batch, a_dim), F64, "pre-tanh action", large=30.0)).astype(dtype)
    d_action = values(data, (batch, a_dim), dtype, "d_action", large=1e6)
    log_alpha = number(data, device, "log_alpha", st.floats(-10.0, 3.0), (-0.5,))
    out = drl.zeros(device, (batch, 2 * a_dim), dtype)
    gaussian_tanh_backward(
        device,
        put(device, actor_out),
        put(device, noise),
        put(device, action),
        put(device, d_action),
        put(device, [log_alpha], dtype),
        out,
    )
    u = U[dtype]
    a, eps, da = f64(action), read(device, noise), read(device, d_action)
    raw = read(device, actor_out[:, a_dim:])
    std = np.exp(np.clip(raw, LOG_STD_MIN, LOG_STD_MAX))
    scale = math.exp(float(np.asarray(log_alpha, dtype))) / batch
    x = 1 - a * a
    ratio = x / (x + 1e-6)
    d_u = da * x + scale * 2 * a * ratio
    # 1 − a² is computed to within 2u (|a| ≤ 1); the ratio x/(x + 1e-6) then moves by up to
    # 2u·1e-6/(x + 1e-6)²; fastmath (CPU) may reassociate the denominator to (1 + 1e-6) − a²,
    # an independent error of 2u in it: 4u/(x + 1e-6) relative to the ratio; a few more
    # roundings of each term
    x_err = 2 * u + TINY[dtype]
    d_u_bound = (
        np.abs(da) * (x_err + 4 * u * x)
        + scale * 2 * np.abs(a) * (x_err * 1e-6 / (x + 1e-6) ** 2 + ratio * 4 * u / (x + 1e-6) + 4 * u)
        + 4 * TINY[dtype]
    )
    got = host(out)
    assert_within("d_mean", got[:, :a_dim], d_u, d_u_bound)
    inside = (raw > LOG_STD_MIN) & (raw < LOG_STD_MAX)
    d_log_std = np.where(inside, d_u * std * eps - scale, 0.0)
    bound = np.where(inside, d_u_bound * std * np.abs(eps) + 6 * u * (np.abs(d_u * std * eps) + scale), 0.0)
    assert_within("d_log_std", got[:, a_dim:], d_log_std, bound + 4 * TINY[dtype])


@devices
@fuzz
def test_entropy_temperature_gradient(name, data):
    device, dtype = DEVICES[name], dtype_of(data)
    batch = dim(data, device, "batch", big=64)
    log_prob = values(data, (batch, 1), dtype, "log_prob", large=1e6)
    target_entropy = number(data, device, "target_entropy", st.floats(-100.0, 100.0), (-1.0, -6.0))
    grad = drl.zeros(device, 1, dtype)
    entropy_temperature_gradient(device, put(device, log_prob), target_entropy, grad)
    terms = read(device, log_prob)[:, 0] + target_entropy
    # a sum of B terms (each a rounded sum) and a division
    bound = (batch + 4) * U[dtype] * np.abs(terms).mean() + 4 * TINY[dtype]
    assert_within("grad", host(grad), [-terms.mean()], [bound])


@devices
@fuzz
def test_track_episodes(name, data):
    device = DEVICES[name]
    n = dim(data, device, "num_envs", big=16)
    capacity = data.draw(st.integers(1, 6), label="capacity")
    log = episode_log(device, n, capacity)
    step = drl.zeros(device, 1, np.int64)
    running_return, running_length = np.zeros(n), np.zeros(n, np.int64)
    # the ring: episode k in slot k % capacity
    returns, lengths, end_steps, count = (
        np.zeros(capacity),
        np.zeros(capacity, np.int64),
        np.zeros(capacity, np.int64),
        0,
    )
    for t in range(data.draw(st.integers(1, 6), label="steps")):
        reward = values(data, (n,), F32, f"reward {t}", large=1e6)
        terminated, truncated = flags(data, n, f"terminated {t}"), flags(data, n, f"truncated {t}")
        track_episodes(device, log, put(device, reward), put(device, terminated), put(device, truncated), step)
        running_return += read(device, reward)  # denormal rewards read as 0 where flushed
        running_length += 1
        for i in np.flatnonzero(terminated | truncated):
            at = count % capacity
            returns[at], lengths[at], end_steps[at] = running_return[i], running_length[i], t
            count += 1
            running_return[i], running_length[i] = 0.0, 0
        drl.increment(device, step)
    # float64 sums of float32 rewards, in the same order (env by env, step by step): exact
    # up to the float64 rounding of each addition
    assert host(log.count).tolist() == [count]
    k = min(count, capacity)
    np.testing.assert_allclose(host(log.returns)[:k], returns[:k], rtol=1e-15 * 8, atol=0)
    assert host(log.lengths)[:k].tolist() == lengths[:k].tolist()
    assert host(log.end_steps)[:k].tolist() == end_steps[:k].tolist()
    np.testing.assert_allclose(host(log.running_return), running_return, rtol=1e-15 * 8, atol=0)
    np.testing.assert_array_equal(host(log.running_length), running_length)


# --- on-policy ops ------------------------------------------------------------------------------

#: discount factors: 0 or in [1e-3, 1], so that γᵏ over a rollout does not underflow (the
#: references multiply powers of γ in another order than the kernels)
DISCOUNTS = st.one_of(st.just(0.0), st.floats(1e-3, 1.0))


def flags(data, shape, label):
    g = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label=f"{label} seed"))
    rate = data.draw(st.sampled_from((0.0, 0.1, 0.5, 1.0)), label=f"{label} rate")
    return g.random(shape) < rate


@devices
@fuzz
def test_random_permutation(name, data):
    """Fisher–Yates over the stream: j_i = min(⌊u_i·(i + 1)⌋, i) for i = n − 1 … 1, u_i the stream's
    sample i; the counter advances by n. The same permutation on every device."""
    device = DEVICES[name]
    n = dim(data, device, "n", big=300)
    key, counter = rng_state(data, device)
    perm = drl.zeros(device, n, np.int64)
    stream = put(device, np.array([key, counter], np.uint64))
    random_permutation(device, stream, perm)
    u = uniform01(key, counter, n)
    expected = np.arange(n)
    for i in range(n - 1, 0, -1):
        j = min(int(u[i] * (i + 1)), i)
        expected[i], expected[j] = expected[j], expected[i]
    np.testing.assert_array_equal(host(perm), expected)
    assert host(stream).tolist() == [key, (counter + n) & MASK]


def gae_reference(reward, value, next_value, terminated, truncated, gamma, lam):
    """Our statement: δ_t = r_t + γ(1 − term_t)·nv_t − v_t, A_t = δ_t + γλ(1 − term_t)(1 − trunc_t)·A_{t+1},
    A_T = 0; also Σ of the magnitudes along the same chain (what rounding errors scale with)."""
    steps = reward.shape[0]
    adv, scale = np.zeros_like(reward), np.zeros_like(reward)
    running, running_scale = np.zeros(reward.shape[1]), np.zeros(reward.shape[1])
    for t in reversed(range(steps)):
        boot = np.where(terminated[t], 0.0, gamma * next_value[t])
        delta = reward[t] + boot - value[t]
        carry = np.where(terminated[t] | truncated[t], 0.0, gamma * lam) if t + 1 < steps else 0.0
        running = delta + carry * running
        running_scale = np.abs(reward[t]) + np.abs(boot) + np.abs(value[t]) + carry * running_scale
        adv[t], scale[t] = running, running_scale
    return adv, scale


@devices
@fuzz
def test_gae(name, data):
    device, dtype = DEVICES[name], dtype_of(data)
    steps, envs = dim(data, device, "T"), dim(data, device, "N", big=16)
    gamma = number(data, device, "gamma", DISCOUNTS, (0.99, 1.0))
    lam = number(data, device, "lam", DISCOUNTS, (0.95, 0.0))
    reward, value, next_value = (values(data, (steps, envs), dtype, s) for s in ("reward", "value", "next_value"))
    terminated, truncated = flags(data, (steps, envs), "terminated"), flags(data, (steps, envs), "truncated")
    advantage, returns = drl.zeros(device, (steps, envs), dtype), drl.zeros(device, (steps, envs), dtype)
    with_returns = data.draw(st.booleans(), label="returns")
    gae(
        device,
        put(device, reward),
        put(device, value),
        put(device, next_value),
        put(device, terminated),
        put(device, truncated),
        gamma,
        lam,
        advantage,
        returns if with_returns else None,
    )
    ref, scale = gae_reference(
        read(device, reward), read(device, value), read(device, next_value), terminated, truncated, gamma, lam
    )
    # each of the ≤ T steps of the recurrence rounds a few products and sums: (T + 4)·u of the
    # discounted sum of magnitudes along the episode
    bound = (steps + 4) * 2 * U[dtype] * scale + 8 * TINY[dtype] * steps
    assert_within("advantage", host(advantage), ref, bound)
    if with_returns:
        v = read(device, value)
        assert_within("returns", host(returns), ref + v, bound + 2 * U[dtype] * (np.abs(ref) + np.abs(v)))
    else:
        assert not host(returns).any()


def returns_reference(reward, next_value, terminated, truncated, gamma, n):
    """G_t = Σ_{k<m} γ^k r_{t+k} + γ^m·nv_{t+m−1}, the sum stopping at n steps, the episode's end or
    the rollout's end; no bootstrap after a termination. Also the matching sum of magnitudes."""
    steps, envs = reward.shape
    out, scale = np.zeros_like(reward), np.zeros_like(reward)
    for t in range(steps):
        for e in range(envs):
            total = magnitude = 0.0
            for k in range(min(n, steps - t)):
                j = t + k
                total += gamma**k * reward[j, e]
                magnitude += abs(gamma**k * reward[j, e])
                if terminated[j, e]:
                    break
                if truncated[j, e] or k == n - 1 or j == steps - 1:
                    total += gamma ** (k + 1) * next_value[j, e]
                    magnitude += abs(gamma ** (k + 1) * next_value[j, e])
                    break
            out[t, e], scale[t, e] = total, magnitude
    return out, scale


@devices
@fuzz
def test_discounted_returns(name, data):
    device, dtype = DEVICES[name], dtype_of(data)
    steps, envs = dim(data, device, "T", big=24), dim(data, device, "N", big=8)
    gamma = number(data, device, "gamma", DISCOUNTS, (0.99, 1.0))
    n = data.draw(st.one_of(st.none(), st.integers(1, steps + 2)), label="n")
    if is_c(device):
        n = data.draw(st.sampled_from((None, 1, 3)), label="n on C")
    reward, next_value = values(data, (steps, envs), dtype, "reward"), values(data, (steps, envs), dtype, "next_value")
    terminated, truncated = flags(data, (steps, envs), "terminated"), flags(data, (steps, envs), "truncated")
    returns = drl.zeros(device, (steps, envs), dtype)
    discounted_returns(
        device,
        put(device, reward),
        put(device, next_value),
        put(device, terminated),
        put(device, truncated),
        gamma,
        returns,
        n,
    )
    ref, scale = returns_reference(
        read(device, reward), read(device, next_value), terminated, truncated, gamma, steps if n is None else n
    )
    # ≤ T + 1 terms, each a power of γ (rounded through its repeated products) times a value
    bound = (2 * steps + 6) * U[dtype] * scale + 8 * TINY[dtype] * steps
    assert_within("returns", host(returns), ref, bound)


def stats_arrays(data, device, dim_):
    mean = values(data, (dim_,), F64, "stats.mean", large=1e6)
    var = np.abs(values(data, (dim_,), F64, "stats.var", large=1e6))
    count = data.draw(st.sampled_from((1e-4, 1.0, 37.0, 1e6)), label="stats.count")
    stats = obs_stats(device, dim_)
    drl.assign(stats.mean, mean)
    drl.assign(stats.var, var)
    drl.assign(stats.count, [count])
    return stats, mean, var, count


def stats_case(name, data):
    """An observation-statistics case on device ``name``: (device, dtype, rows, cols, stats_arrays'
    four, x of rows × cols), drawn in that order."""
    device, dtype = DEVICES[name], dtype_of(data)
    rows, cols = dim(data, device, "rows"), dim(data, device, "cols")
    stats = stats_arrays(data, device, cols)
    return device, dtype, rows, cols, stats, values(data, (rows, cols), dtype, "x", large=1e6)


@devices
@fuzz
def test_normalize_observations(name, data):
    device, dtype, rows, cols, (stats, mean, var, _), x = stats_case(name, data)
    out = drl.zeros(device, (rows, cols), dtype)
    normalize_observations(device, stats, put(device, x), out)
    scale = np.sqrt(var + 1e-8)
    expected = (read(device, x) - mean) / scale
    # x − mean (mean possibly rounded to dtype first), a square root, a division, rounding to dtype
    bound = 4 * U[dtype] * (np.abs(expected) + (np.abs(f64(x)) + np.abs(mean)) / scale) + 4 * TINY[dtype] / scale
    assert_within("out", host(out), expected, bound)


@devices
@fuzz
def test_running_stats_update(name, data):
    device, dtype, rows, cols, (stats, mean, var, count), x = stats_case(name, data)
    bad_columns = np.zeros(cols, bool)
    if data.draw(st.booleans(), label="non-finite"):
        bad = data.draw(
            st.lists(
                st.tuples(
                    st.integers(0, rows - 1), st.integers(0, cols - 1), st.sampled_from((np.nan, np.inf, -np.inf))
                ),
                min_size=1,
                max_size=4,
            ),
            label="non-finite entries",
        )
        for i, j, v in bad:
            x[i, j] = v
            bad_columns[j] = True
    running_stats_update(device, stats, put(device, x))
    xs = f64(x)[:, ~bad_columns]
    batch_mean, batch_var = xs.mean(0), xs.var(0)
    total = count + rows
    delta = batch_mean - mean[~bad_columns]
    ref_mean = mean.copy()
    ref_var = var.copy()
    ref_mean[~bad_columns] = mean[~bad_columns] + delta * rows / total
    ref_var[~bad_columns] = (var[~bad_columns] * count + batch_var * rows + delta**2 * count * rows / total) / total
    # float64 throughout; a two-pass or Welford mean/variance over B rows: (B + 8)·u64 of the
    # magnitudes involved (values squared for the variance)
    magnitude = np.abs(mean) + np.where(bad_columns, 0, np.abs(np.where(np.isfinite(x), f64(x), 0)).max(0))
    u = (rows + 8) * U[F64]
    assert_within("mean", host(stats.mean), ref_mean, np.where(bad_columns, 0, u * magnitude))
    assert_within("var", host(stats.var), ref_var, np.where(bad_columns, 0, u * (np.abs(ref_var) + 4 * magnitude**2)))
    assert host(stats.count).tolist() == [total]
    assert host(stats.nonfinite).tolist() == [int(bad_columns.sum())]


@devices
@fuzz
def test_gaussian_log_prob(name, data):
    device, dtype = DEVICES[name], dtype_of(data)
    batch, a_dim = dim(data, device, "batch"), dim(data, device, "action_dim", big=8)
    mean, action = (values(data, (batch, a_dim), dtype, s, large=1e6) for s in ("mean", "action"))
    # a state-independent log-std in PPO's range (exp stays finite and normal)
    log_std = np.asarray(
        data.draw(st.lists(st.floats(-5.0, 2.0, width=32), min_size=a_dim, max_size=a_dim), label="log_std"), dtype
    )
    out = drl.zeros(device, batch, dtype)
    gaussian_log_prob(device, put(device, mean), put(device, log_std), put(device, action), out)
    ls = f64(log_std)
    z = (read(device, action) - read(device, mean)) / np.exp(ls)
    expected = np.sum(-0.5 * z * z - ls - 0.5 * math.log(2 * math.pi), axis=1)
    # z: a difference (u of |a| + |mean|) and a division by exp (a few u); z² doubles it; the
    # sum over A terms adds (A + 2)·u of the terms' magnitudes
    u = U[dtype]
    z_err = (u * (np.abs(f64(action)) + np.abs(f64(mean))) + TINY[dtype]) / np.exp(ls) + 4 * u * np.abs(z)
    bound = ((a_dim + 4) * u * (0.5 * z * z + np.abs(ls) + 1) + np.abs(z) * z_err).sum(1)
    assert_within("log_prob", host(out), expected, bound)


# --- environments -------------------------------------------------------------------------------


def pendulum_reference(physics, action, scale, g):
    """gymnasium Pendulum-v1's step in float64 (the library rounds the torque terms to float32, as
    gymnasium does: the bounds below allow for it)."""
    th, thdot = physics[:, 0], physics[:, 1]
    u = np.clip(f64(action[:, 0]) * scale, -2.0, 2.0)
    cost = ((th + np.pi) % (2 * np.pi) - np.pi) ** 2 + 0.1 * thdot**2 + 0.001 * u**2
    new_thdot = np.clip(thdot + (3 * g / 2 * np.sin(th) + 3.0 * u) * 0.05, -8.0, 8.0)
    new_th = th + new_thdot * 0.05
    return np.stack([new_th, new_thdot], 1), -cost


def acrobot_dsdt(s, a):
    """gymnasium Acrobot-v1's "book" dynamics."""
    m1 = m2 = l1 = 1.0
    lc1 = lc2 = 0.5
    I1 = I2 = 1.0
    g = 9.8
    theta1, theta2, dtheta1, dtheta2 = s.T
    d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * np.cos(theta2)) + I1 + I2
    d2 = m2 * (lc2**2 + l1 * lc2 * np.cos(theta2)) + I2
    phi2 = m2 * lc2 * g * np.cos(theta1 + theta2 - np.pi / 2.0)
    phi1 = (
        -m2 * l1 * lc2 * dtheta2**2 * np.sin(theta2)
        - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * np.sin(theta2)
        + (m1 * lc1 + m2 * l1) * g * np.cos(theta1 - np.pi / 2)
        + phi2
    )
    ddtheta2 = (a + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * np.sin(theta2) - phi2) / (
        m2 * lc2**2 + I2 - d2**2 / d1
    )
    ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
    return np.stack([dtheta1, dtheta2, ddtheta1, ddtheta2], 1)


def acrobot_reference(physics, action):
    """One RK4 step of 0.2 s with torque clip(action, −1, 1), angles wrapped to [−π, π],
    velocities clipped; terminated when the tip is above the bar."""
    torque = np.clip(f64(action[:, 0]), -1.0, 1.0)
    k1 = acrobot_dsdt(physics, torque)
    k2 = acrobot_dsdt(physics + 0.1 * k1, torque)
    k3 = acrobot_dsdt(physics + 0.1 * k2, torque)
    k4 = acrobot_dsdt(physics + 0.2 * k3, torque)
    s = physics + 0.2 / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
    s[:, :2] = (s[:, :2] + np.pi) % (2 * np.pi) - np.pi
    s[:, 2] = np.clip(s[:, 2], -4 * np.pi, 4 * np.pi)
    s[:, 3] = np.clip(s[:, 3], -9 * np.pi, 9 * np.pi)
    height = -np.cos(s[:, 0]) - np.cos(s[:, 1] + s[:, 0])
    return s, height


def angle_difference(a, b):
    return np.abs((a - b + np.pi) % (2 * np.pi) - np.pi)


def env_actions(data, n, label="action"):
    """float32 actions in and beyond the bounds, large ones and denormals (never NaN: refused
    by the env APIs)."""
    a = values(data, (n, 1), F32, label, large=1e6)
    return a


def stepped_from(device, env, physics, steps, action):
    """A fresh state of ``env`` set to ``physics`` and ``steps``, then one ``env_step`` with ``action``."""
    state = env_state(device, env)
    drl.assign(state.physics, physics)
    drl.assign(state.steps, steps)
    env_step(device, env, state, put(device, action))
    return state


@devices
@fuzz
def test_pendulum_step(name, data):
    device = DEVICES[name]
    n = dim(data, device, "num_envs", big=64)
    normalized = data.draw(st.booleans(), label="normalized_actions")
    g = number(data, device, "g", st.floats(0.0, 20.0), (10.0,))
    max_steps = number(data, device, "max_episode_steps", st.integers(1, 300), (200,))
    env = Pendulum(n, normalized_actions=normalized, max_episode_steps=max_steps, g=g)
    rs = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="state seed"))
    physics = np.stack([rs.uniform(-1, 1, n) * 10.0 ** rs.uniform(-3, 2, n), rs.uniform(-8, 8, n)], 1)
    steps = rs.integers(0, max_steps, n)
    action = env_actions(data, n)
    state = stepped_from(device, env, physics, steps, action)
    ref, reward = pendulum_reference(physics, action, env.action_scale, g)
    # gymnasium's float32 torque terms: 3·u rounded (1.5 u32·6) → dthdot ≤ 0.05·4e-7, th 0.05·that;
    # cost: 0.001·u² rounded (≤ 2.4e-10); sin/cos/mod of th: a few u64·|th|
    th_err = 16 * U[F64] * np.abs(physics[:, 0]) + 1e-12
    thdot_bound = 0.05 * (3 * U[F32] * 6 + 1.5 * g * th_err) + 1e-12
    assert_within("thdot", host(state.physics)[:, 1], ref[:, 1], thdot_bound)
    assert_within("th", host(state.physics)[:, 0], ref[:, 0], 8 * U[F64] * np.abs(ref[:, 0]) + 0.05 * thdot_bound)
    th = host(state.physics)[:, 0]
    obs = host(state.obs)
    # observations: float32 of cos, sin of the new angle, and the velocity
    assert_within("cos", obs[:, 0], np.cos(th), U[F32] + 8 * U[F64] * np.abs(th))
    assert_within("sin", obs[:, 1], np.sin(th), U[F32] + 8 * U[F64] * np.abs(th))
    assert_within("thdot obs", obs[:, 2], host(state.physics)[:, 1], U[F32] * 8)
    # reward: −cost rounded to float32; the wrapped angle's square carries |th|·u64 errors
    wrapped = (physics[:, 0] + np.pi) % (2 * np.pi) - np.pi
    assert_within("reward", host(state.reward), reward, U[F32] * np.abs(reward) + 2 * np.pi * th_err + 1e-9)
    np.testing.assert_array_equal(host(state.steps), steps + 1)
    np.testing.assert_array_equal(host(state.terminated), np.zeros(n, bool))
    np.testing.assert_array_equal(host(state.truncated), steps + 1 >= max_steps)
    assert np.isfinite(wrapped).all()


@devices
@fuzz
def test_acrobot_step(name, data):
    device = DEVICES[name]
    n = dim(data, device, "num_envs", big=64)
    max_steps = number(data, device, "max_episode_steps", st.integers(1, 600), (500,))
    env = AcrobotContinuous(n, max_episode_steps=max_steps)
    rs = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="state seed"))
    bounds = np.array([np.pi, np.pi, 4 * np.pi, 9 * np.pi])
    physics = rs.uniform(-1, 1, (n, 4)) * bounds * data.draw(st.sampled_from((0.01, 0.5, 1.0)), label="spread")
    steps = rs.integers(0, max_steps, n)
    action = env_actions(data, n)
    state = stepped_from(device, env, physics, steps, action)
    ref, height = acrobot_reference(physics, action)
    got = host(state.physics)
    # one float64 RK4 step in the same operation order as gymnasium: libm sin/cos differ by an
    # ulp or so between devices, and derivatives up to ~10³ over 0.2 s amplify that to ≲ 1e-11;
    # the velocity clip and the angle wrap are exact (angles compared modulo 2π, in case one lands
    # on ±π)
    tolerance = 1e-9
    assert (angle_difference(got[:, :2], ref[:, :2]) <= tolerance).all(), (got, ref)
    assert_within("velocities", got[:, 2:], ref[:, 2:], tolerance)
    assert (np.abs(got[:, :2]) <= np.pi + 1e-12).all()
    obs = host(state.obs)
    expected_obs = np.stack(
        [np.cos(got[:, 0]), np.sin(got[:, 0]), np.cos(got[:, 1]), np.sin(got[:, 1]), got[:, 2], got[:, 3]], 1
    )
    assert_within("obs", obs, expected_obs, U[F32] * np.maximum(np.abs(expected_obs), 1) + 1e-12)
    clear = np.abs(height - 1.0) > 1e-7  # the tip is not on the line: the flag is well defined
    done = height > 1.0
    np.testing.assert_array_equal(host(state.terminated)[clear], done[clear])
    np.testing.assert_array_equal(host(state.reward), np.where(host(state.terminated), 0.0, -1.0))
    np.testing.assert_array_equal(host(state.steps), steps + 1)
    np.testing.assert_array_equal(host(state.truncated), steps + 1 >= max_steps)


# --- bad arguments: refused with the documented error before any kernel runs ---------------------
#
# A builder makes a valid call on a device (arrays of the drawn sizes and dtype) and says which
# mutations do not make it invalid ("exempt": an output of free shape, dtype or both). Mutations:
# "shape" (last axis one longer), "rank" (one more axis) → ShapeError, "dtype" (int32, or the other float
# where the argument's dtype is tied to another's) → DTypeError, "device" (the same array in
# the other memory space, host or CUDA) and "host" (a bare numpy array) → DeviceError; each builder also lists bad numbers
# (→ ConfigError, or the error its declaration documents). After the refused call every array of the
# call must hold what it held before: nothing ran.


class Call:
    def __init__(self, fn, args, kwargs=None, exempt=(), numbers=()):
        self.fn, self.args, self.kwargs = fn, list(args), dict(kwargs or {})
        self.exempt, self.numbers = set(exempt), list(numbers)

    def slots(self):
        """(label, index, field) of every Array argument, struct fields included."""
        found = []
        for i, arg in enumerate(self.args):
            if isinstance(arg, drl.Array):
                found.append((f"#{i}", i, None))
            elif hasattr(arg, "__dataclass_fields__"):
                found += [
                    (f"#{i}.{f}", i, f) for f in arg.__dataclass_fields__ if isinstance(getattr(arg, f), drl.Array)
                ]
            elif isinstance(arg, TensorDict):  # a TensorDict's leaves are fields too (issue 17)
                found += [(f"#{i}.{f}", i, f) for f, leaf in arg.named_leaves() if isinstance(leaf, drl.Array)]
        return found

    def get(self, i, field):
        return self.args[i] if field is None else getattr(self.args[i], field)

    def with_slot(self, i, field, value):
        import dataclasses

        args = list(self.args)
        if field is None:
            args[i] = value
        elif isinstance(args[i], TensorDict):  # past TensorDict's own checks, as a bad leaf could get in
            td = args[i]
            args[i] = TensorDict._raw({**{k: td[k] for k in td.keys()}, field: value}, td.batch_size, td.device)
        else:
            args[i] = dataclasses.replace(args[i], **{field: value})
        return args

    def snapshot(self):
        return [bits(host(self.get(i, f))) for _, i, f in self.slots()]


def _arrays(device, dtype, *shapes):
    return [drl.zeros(device, s, dtype) for s in shapes]


def build(kind, device, dtype, a, b, c):
    """A valid call of generic function ``kind`` with sizes a, b, c."""
    rng = drl.rng(device, 1)
    dt = dtype
    if kind == "matmul":
        return Call(drl.matmul, [device, *_arrays(device, dt, (a, b), (b, c), (a, c))])
    if kind == "relu":
        return Call(drl.relu, [device, *_arrays(device, dt, (a, b), (a, b))])
    if kind == "dense_forward":
        return Call(
            drl.dense_forward,
            [device, *_arrays(device, dt, (a, b), (b, c), (c,), (a, c), (a, c))],
            {"activation": "tanh"},
            numbers=[("activation", ("softmax", None), ConfigError)],
        )
    if kind == "dense_backward":
        return Call(
            drl.dense_backward,
            [device, *_arrays(device, dt, (a, b), (b, c), (a, c), (a, c), (a, c), (a, c), (b, c), (c,), (a, b))],
            {"activation": "gelu"},
            numbers=[("activation", ("sigmoid",), ConfigError)],
        )
    if kind == "dense_input_gradient":
        return Call(
            drl.dense_input_gradient,
            [device, *_arrays(device, dt, (b, c), (a, c), (a, c), (a, c), (a, c), (a, b))],
            {"activation": "relu"},
        )
    if kind == "mse_loss":
        return Call(drl.mse_loss, [device, *_arrays(device, dt, (a, b), (a, b), (1,))])
    if kind == "mse_gradient":
        return Call(drl.mse_gradient, [device, *_arrays(device, dt, (a, b), (a, b), (a, b))])
    if kind == "adam_step":
        return Call(
            drl.adam_step,
            [device, *_arrays(device, dt, (a, b), (a, b), (a, b), (a, b)), drl.zeros(device, 1, np.int64)],
            {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8},
            numbers=[
                ("lr", (0.0, -1.0, math.nan, math.inf, "fast"), ConfigError),
                ("beta1", (1.0, -0.1), ConfigError),
                ("beta2", (1.0, math.nan), ConfigError),
                ("eps", (0.0, -1e-8), ConfigError),
            ],
        )
    if kind == "polyak_update":
        return Call(
            drl.polyak_update,
            [device, *_arrays(device, dt, (a, b), (a, b))],
            {"polyak": 0.995},
            numbers=[("polyak", (1.5, -0.1, math.nan), ConfigError)],
        )
    if kind == "fill":
        return Call(
            drl.fill,
            [device, drl.zeros(device, (a, b), dt)],
            {"value": 2.0},
            exempt={("#1", "shape"), ("#1", "rank"), ("#1", "dtype")},
            numbers=[("value", (math.nan, math.inf, "one"), ConfigError)],
        )
    if kind == "copy":
        return Call(drl.copy, [device, *_arrays(device, dt, (a, b), (a, b))])
    if kind == "increment":
        return Call(
            drl.increment,
            [device, drl.zeros(device, 1, np.int64)],
            {"amount": 3},
            numbers=[("amount", (1.5, "2"), ConfigError)],
        )
    if kind == "random_uniform":
        return Call(
            drl.random_uniform,
            [device, rng, drl.zeros(device, (a, b), dt)],
            {"low": -1.0, "high": 1.0},
            exempt={("#2", "shape"), ("#2", "rank"), ("#2", "dtype-float")},
            numbers=[("high", (-2.0, math.inf), ConfigError), ("low", (math.nan,), ConfigError)],
        )
    if kind == "random_normal":
        return Call(
            drl.random_normal,
            [device, rng, drl.zeros(device, (a, b), dt)],
            {"mean": 0.0, "std": 1.0},
            exempt={("#2", "shape"), ("#2", "rank"), ("#2", "dtype-float")},
            numbers=[("std", (-1.0, math.nan), ConfigError), ("mean", (math.inf,), ConfigError)],
        )
    if kind == "replay_add":
        buffer = replay_buffer(device, a + 2, b, c, dt)
        rows = transitions(device, a, b, c, dt)
        return Call(replay_add, [device, buffer, *(getattr(rows, f) for f in FIELDS)])
    if kind == "replay_sample":
        buffer = replay_buffer(device, a + 2, b, c, dt)
        drl.assign(buffer.size, [1])
        return Call(
            replay_sample,
            [device, rng, buffer, transitions(device, a, b, c, dt)],
            # position is not read by sampling
            exempt={("#2.position", k) for k in ("shape", "rank", "dtype", "dtype-float", "device", "host")},
        )
    if kind == "concat_columns":
        return Call(concat_columns, [device, *_arrays(device, dt, (a, b), (a, c), (a, b + c))])
    if kind == "slice_columns":
        return Call(
            slice_columns,
            [device, drl.zeros(device, (a, b + c), dt), b, drl.zeros(device, (a, c), dt)],
            # a wider x still holds the columns
            exempt={("#1", "shape")},
            numbers=[(2, (b + 1, -1, 0.5), ShapeError)],
        )
    if kind == "td_target":
        return Call(
            td_target,
            [device, drl.zeros(device, a, dt), drl.zeros(device, a, np.bool_), *_arrays(device, dt, (a, 1), (a, 1))],
            {"gamma": 0.99, "target": drl.zeros(device, (a, 1), dt)},
            numbers=[("gamma", (1.5, -0.1, math.nan), ConfigError)],
        )
    if kind == "soft_td_target":
        return Call(
            soft_td_target,
            [
                device,
                drl.zeros(device, a, dt),
                drl.zeros(device, a, np.bool_),
                *_arrays(device, dt, (a, 1), (a, 1), (a, 1), (1,)),
            ],
            {"gamma": 0.99, "target": drl.zeros(device, (a, 1), dt)},
            numbers=[("gamma", (2.0,), ConfigError)],
        )
    if kind == "add_clipped_noise":
        return Call(
            add_clipped_noise,
            [device, rng, drl.zeros(device, (a, b), dt)],
            {"std": 0.1, "noise_clip": 0.5, "low": -1.0, "high": 1.0},
            exempt={("#2", "shape"), ("#2", "rank"), ("#2", "dtype-float")},
            numbers=[
                ("std", (-0.1,), ConfigError),
                ("noise_clip", (-1.0, math.nan), ConfigError),
                ("high", (-2.0,), ConfigError),
            ],
        )
    if kind == "select_min_rows":
        return Call(select_min_rows, [device, *_arrays(device, dt, (a, 1), (a, 1), (a, b), (a, b), (a, b))])
    if kind == "gaussian_tanh_sample":
        return Call(gaussian_tanh_sample, [device, rng, *_arrays(device, dt, (a, 2 * b), (a, b), (a, b), (a, 1))])
    if kind == "gaussian_tanh_backward":
        return Call(
            gaussian_tanh_backward, [device, *_arrays(device, dt, (a, 2 * b), (a, b), (a, b), (a, b), (1,), (a, 2 * b))]
        )
    if kind == "entropy_temperature_gradient":
        return Call(
            entropy_temperature_gradient,
            [device, drl.zeros(device, (a, 1), dt)],
            {"target_entropy": -1.0, "grad": drl.zeros(device, 1, dt)},
            numbers=[("target_entropy", (math.nan, "low"), ConfigError)],
        )
    if kind == "track_episodes":
        return Call(
            track_episodes,
            [
                device,
                episode_log(device, a, b),
                drl.zeros(device, a, np.float32),
                drl.zeros(device, a, np.bool_),
                drl.zeros(device, a, np.bool_),
                drl.zeros(device, 1, np.int64),
            ],
            exempt={("#2", "dtype-float")},
        )  # rewards of either float dtype
    if kind == "random_permutation":
        return Call(
            random_permutation, [device, rng, drl.zeros(device, a + b, np.int64)], exempt={("#2", "shape")}
        )  # a permutation of any length
    if kind == "gae":
        flags_ = [drl.zeros(device, (a, b), np.bool_) for _ in range(2)]
        return Call(
            gae,
            [device, *_arrays(device, dt, (a, b), (a, b), (a, b)), *flags_],
            {
                "gamma": 0.99,
                "lam": 0.95,
                "advantage": drl.zeros(device, (a, b), dt),
                "returns": drl.zeros(device, (a, b), dt),
            },
            numbers=[("gamma", (1.01,), ConfigError), ("lam", (-0.5, math.nan), ConfigError)],
        )
    if kind == "discounted_returns":
        flags_ = [drl.zeros(device, (a, b), np.bool_) for _ in range(2)]
        return Call(
            discounted_returns,
            [device, *_arrays(device, dt, (a, b), (a, b)), *flags_],
            {"gamma": 0.99, "returns": drl.zeros(device, (a, b), dt), "n": 2},
            numbers=[("n", (0, -1, 1.5, True), ShapeError), ("gamma", (math.inf,), ConfigError)],
        )
    if kind == "running_stats_update":
        return Call(
            running_stats_update,
            [device, obs_stats(device, b), drl.zeros(device, (a, b), dt)],
            exempt={("#2", "dtype-float")},
        )  # observations of either float dtype
    if kind == "normalize_observations":
        return Call(normalize_observations, [device, obs_stats(device, b), *_arrays(device, dt, (a, b), (a, b))])
    if kind == "gaussian_log_prob":
        return Call(gaussian_log_prob, [device, *_arrays(device, dt, (a, b), (b,), (a, b), (a,))])
    if kind in ("pendulum", "acrobot"):
        env = Pendulum(a) if kind == "pendulum" else AcrobotContinuous(a)
        return Call(
            env_step,
            [device, env, env_state(device, env), drl.zeros(device, (a, 1), np.float32)],
            numbers=[(1, (Pendulum, "Pendulum-v1"), ConfigError)],
        )
    raise AssertionError(kind)


BAD_ARGUMENT_FAMILIES = [
    "matmul",
    "relu",
    "dense_forward",
    "dense_backward",
    "dense_input_gradient",
    "mse_loss",
    "mse_gradient",
    "adam_step",
    "polyak_update",
    "fill",
    "copy",
    "increment",
    "random_uniform",
    "random_normal",
    "replay_add",
    "replay_sample",
    "concat_columns",
    "slice_columns",
    "td_target",
    "soft_td_target",
    "add_clipped_noise",
    "select_min_rows",
    "gaussian_tanh_sample",
    "gaussian_tanh_backward",
    "entropy_temperature_gradient",
    "track_episodes",
    "random_permutation",
    "gae",
    "discounted_returns",
    "running_stats_update",
    "normalize_observations",
    "gaussian_log_prob",
    "pendulum",
    "acrobot",
]
ERRORS = {
    "shape": ShapeError,
    "rank": ShapeError,
    "dtype": DTypeError,
    "dtype-float": DTypeError,
    "device": DeviceError,
    "host": DeviceError,
}


def mutations(call, device):
    """Every (slot label, kind, replacement args) of ``call`` that must be refused."""
    # every host device accepts every host array (one memory space): "device" means the other space
    other = drl.CPU() if device.memory == "cuda" else drl.CUDA()
    out = []
    for label, i, field in call.slots():
        arr = call.get(i, field)
        shape, dtype = arr.shape, arr.dtype
        longer = tuple(s + 1 if k == len(shape) - 1 else s for k, s in enumerate(shape))
        candidates = {
            "shape": [drl.zeros(device, longer, dtype)],
            "rank": [drl.zeros(device, shape + (1,), dtype)],
            "dtype": [drl.zeros(device, shape, np.int32)],
            "device": [drl.zeros(other, shape, dtype)],
            "host": [np.zeros(shape, dtype)],
        }
        if dtype.kind == "f":
            candidates["dtype-float"] = [drl.zeros(device, shape, F64 if dtype == F32 else F32)]
        for kind, replacements in candidates.items():
            if (label, kind) in call.exempt or (kind == "dtype-float" and (label, "dtype") in call.exempt):
                continue
            out += [(label, kind, call.with_slot(i, field, r)) for r in replacements]
    return out


def assert_refused(call, args, kwargs, error, what):
    before = call.snapshot()
    with pytest.raises(error) as caught:
        call.fn(*args, **kwargs)
    message = str(caught.value)
    # the declaration names the function (and, in its message, the argument)
    assert message.startswith(call.fn.__name__ + ":") or "env_step" in message, (what, message)
    after = call.snapshot()
    for label, b, a in zip((s[0] for s in call.slots()), before, after):
        np.testing.assert_array_equal(a, b, err_msg=f"{what}: {label} changed by a refused call")


def refusals(call, device):
    """Every bad call of ``call``: (description, args, kwargs, expected error)."""
    cases = [(f"{label} {kind}", args, call.kwargs, ERRORS[kind]) for label, kind, args in mutations(call, device)]
    for key, bad_values, error in call.numbers:
        for value in bad_values:
            if isinstance(key, int):
                args = list(call.args)
                args[key] = value
                cases.append((f"#{key}={value!r}", args, call.kwargs, error))
            else:
                cases.append((f"{key}={value!r}", call.args, {**call.kwargs, key: value}, error))
    # the device itself: not a Device, or a device of another memory space than the arrays'
    cases.append(("device 'cpu'", ["cpu", *call.args[1:]], call.kwargs, DeviceError))
    foreign = drl.CUDA() if device.memory == "host" else drl.CPU()
    cases.append((f"device {foreign!r}", [foreign, *call.args[1:]], call.kwargs, DeviceError))
    return cases


@devices
@pytest.mark.parametrize("family", BAD_ARGUMENT_FAMILIES)
def test_every_bad_argument_is_refused(name, family):
    """Every argument of every family, every kind of mistake, at one set of odd sizes."""
    device = DEVICES[name]
    for dtype in FLOAT_DTYPES:
        call = build(family, device, dtype, 3, 2, 5)
        call.fn(*call.args, **call.kwargs)  # the unmutated call is valid
        for what, args, kwargs, error in refusals(call, device):
            assert_refused(call, args, kwargs, error, f"{family} {dtype.name} {what}")


@devices
@fuzz
def test_bad_arguments_at_random_sizes(name, data):
    """A random family, sizes and dtype, and one random mistake."""
    device = DEVICES[name]
    family = data.draw(st.sampled_from(BAD_ARGUMENT_FAMILIES), label="family")
    sizes = [dim(data, device, s, big=12) for s in "abc"]
    call = build(family, device, dtype_of(data), *sizes)
    cases = refusals(call, device)
    what, args, kwargs, error = data.draw(st.sampled_from(cases), label="mistake")
    assert_refused(call, args, kwargs, error, f"{family} {what}")
