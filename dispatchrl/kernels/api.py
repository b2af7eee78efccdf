"""Declarations of the core generic functions: their contract, checked before any method runs.

Each declaration validates devices, dtypes and static shapes, raising a dispatchrl error that
names the argument, and returns the positional arguments the device methods receive. Methods
live in one module per backend: ``generic.py`` (numpy), ``cpu.py`` (Numba), ``cuda.py``.
"""

import numpy as np

from ..arrays import Array
from ..devices import Device
from ..dispatch import generic
from ..errors import ConfigError, DeviceError, DTypeError, ShapeError

#: activation name → code the kernels branch on (a compile-time constant in fused steps)
ACTIVATIONS = {"identity": 0, "relu": 1, "tanh": 2, "gelu": 3}
FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def check_device(fn, device):
    if not isinstance(device, Device):
        raise DeviceError(f"{fn}: argument 'device' must be a dispatchrl Device such as CPU(), "
                          f"got {device!r}")


def check_array(fn, name, x, device, shape=None, dtype=None, dtypes=FLOATS):
    """Validate argument ``name``; ``shape`` may hold None for a free dimension."""
    if not isinstance(x, Array):
        raise DeviceError(f"{fn}: argument '{name}' must be a dispatchrl Array on {device!r}, got "
                          f"{type(x).__name__} (wrap host data with dispatchrl.asarray(device, x))")
    if type(x.device) is not type(device):
        raise DeviceError(f"{fn}: argument '{name}' is on {x.device!r} but the call is on {device!r}"
                          " (transfer it explicitly with dispatchrl.asarray)")
    if dtype is not None and x.dtype != dtype:
        raise DTypeError(f"{fn}: argument '{name}' has dtype {x.dtype.name}, expected {np.dtype(dtype).name}")
    if dtype is None and dtypes is not None and x.dtype not in dtypes:
        raise DTypeError(f"{fn}: argument '{name}' has dtype {x.dtype.name}, expected one of "
                         + ", ".join(d.name for d in dtypes))
    if shape is not None and (len(shape) != x.ndim or any(e is not None and e != s for e, s in zip(shape, x.shape))):
        expected = "(" + ", ".join("*" if e is None else str(e) for e in shape) + ("," if len(shape) == 1 else "") + ")"
        raise ShapeError(f"{fn}: argument '{name}' has shape {x.shape}, expected {expected}")
    return x


def check_number(fn, name, value, low=-np.inf, high=np.inf, low_open=False, high_open=False):
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{fn}: argument '{name}' must be a number, got {value!r}") from None
    too_low = value <= low if low_open else value < low
    too_high = value >= high if high_open else value > high
    if not np.isfinite(value) or too_low or too_high:
        interval = f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
        raise ConfigError(f"{fn}: argument '{name}' must be finite and in {interval}, got {value}")
    return value


def check_activation(fn, activation):
    if activation not in ACTIVATIONS:
        raise ConfigError(f"{fn}: argument 'activation' must be one of {sorted(ACTIVATIONS)}, "
                          f"got {activation!r}")
    return activation


@generic(outputs=("out",))
def matmul(device, a, b, out):
    """``out = a @ b`` for 2-D arrays of one float dtype."""
    check_device("matmul", device)
    check_array("matmul", "a", a, device, shape=(None, None))
    m, k = a.shape
    check_array("matmul", "b", b, device, shape=(k, None), dtype=a.dtype)
    check_array("matmul", "out", out, device, shape=(m, b.shape[1]), dtype=a.dtype)
    return device, a, b, out


def _elementwise(name, doc):
    def declaration(device, x, out):
        check_device(name, device)
        check_array(name, "x", x, device)
        check_array(name, "out", out, device, shape=x.shape, dtype=x.dtype)
        return device, x, out

    declaration.__name__ = declaration.__qualname__ = name
    declaration.__doc__ = doc
    return generic(outputs=("out",), may_alias={"out": ("x",)})(declaration)


identity = _elementwise("identity", "``out = x``")
relu = _elementwise("relu", "``out = max(x, 0)``")
tanh = _elementwise("tanh", "``out = tanh(x)``")
gelu = _elementwise("gelu", "``out = x Φ(x)`` (exact GELU, with erf)")


def _check_dense(fn, device, x, W, b, pre, out):
    check_device(fn, device)
    check_array(fn, "x", x, device, shape=(None, None))
    batch, n_in = x.shape
    check_array(fn, "W", W, device, shape=(n_in, None), dtype=x.dtype)
    n_out = W.shape[1]
    check_array(fn, "b", b, device, shape=(n_out,), dtype=x.dtype)
    check_array(fn, "pre", pre, device, shape=(batch, n_out), dtype=x.dtype)
    check_array(fn, "out", out, device, shape=(batch, n_out), dtype=x.dtype)


@generic(outputs=("pre", "out"), may_alias={"out": ("pre",)})
def dense_forward(device, x, W, b, pre, out, activation="identity"):
    """Fused dense layer: ``pre = x @ W + b``, ``out = activation(pre)``; W is (in, out)."""
    _check_dense("dense_forward", device, x, W, b, pre, out)
    return device, x, W, b, pre, out, check_activation("dense_forward", activation)


@generic(outputs=("d_pre", "dW", "db", "d_x"))
def dense_backward(device, x, W, pre, out, d_out, d_pre, dW, db, d_x=None, activation="identity"):
    """Backward of :func:`dense_forward`: ``d_pre = d_out * activation'(pre)``,
    ``dW = xᵀ d_pre``, ``db = Σ_batch d_pre`` and, unless ``d_x`` is None, ``d_x = d_pre Wᵀ``.
    Gradients are overwritten, not accumulated."""
    fn = "dense_backward"
    check_device(fn, device)
    check_array(fn, "x", x, device, shape=(None, None))
    batch, n_in = x.shape
    check_array(fn, "W", W, device, shape=(n_in, None), dtype=x.dtype)
    n_out = W.shape[1]
    for name, arr, shape in (("pre", pre, (batch, n_out)), ("out", out, (batch, n_out)),
                             ("d_out", d_out, (batch, n_out)), ("d_pre", d_pre, (batch, n_out)),
                             ("dW", dW, W.shape), ("db", db, (n_out,))):
        check_array(fn, name, arr, device, shape=shape, dtype=x.dtype)
    if d_x is not None:
        check_array(fn, "d_x", d_x, device, shape=x.shape, dtype=x.dtype)
    return device, x, W, pre, out, d_out, d_pre, dW, db, d_x, check_activation(fn, activation)


@generic(outputs=("d_pre", "d_x"))
def dense_input_gradient(device, W, pre, out, d_out, d_pre, d_x, activation="identity"):
    """The input half of :func:`dense_backward`: ``d_pre = d_out * activation'(pre)`` and
    ``d_x = d_pre Wᵀ``, leaving parameter gradients alone (backpropagating through a network
    that is not being trained, e.g. a critic into an actor)."""
    fn = "dense_input_gradient"
    check_device(fn, device)
    check_array(fn, "W", W, device, shape=(None, None))
    n_in, n_out = W.shape
    check_array(fn, "pre", pre, device, shape=(None, n_out), dtype=W.dtype)
    batch = pre.shape[0]
    for name, arr in (("out", out), ("d_out", d_out), ("d_pre", d_pre)):
        check_array(fn, name, arr, device, shape=(batch, n_out), dtype=W.dtype)
    check_array(fn, "d_x", d_x, device, shape=(batch, n_in), dtype=W.dtype)
    return device, W, pre, out, d_out, d_pre, d_x, check_activation(fn, activation)


@generic(outputs=("loss",))
def mse_loss(device, pred, target, loss):
    """``loss[0] = mean((pred - target)²)`` over all elements."""
    check_device("mse_loss", device)
    check_array("mse_loss", "pred", pred, device)
    check_array("mse_loss", "target", target, device, shape=pred.shape, dtype=pred.dtype)
    check_array("mse_loss", "loss", loss, device, shape=(1,), dtype=pred.dtype)
    return device, pred, target, loss


@generic(outputs=("d_pred",))
def mse_gradient(device, pred, target, d_pred):
    """``d_pred = 2 (pred - target) / pred.size``, the gradient of :func:`mse_loss`."""
    check_device("mse_gradient", device)
    check_array("mse_gradient", "pred", pred, device)
    check_array("mse_gradient", "target", target, device, shape=pred.shape, dtype=pred.dtype)
    check_array("mse_gradient", "d_pred", d_pred, device, shape=pred.shape, dtype=pred.dtype)
    return device, pred, target, d_pred


@generic(inplace=("param", "m", "v", "t"))
def adam_step(device, param, grad, m, v, t, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8):
    """One Adam update of ``param`` (Kingma & Ba, bias-corrected). ``t`` is the parameter's
    int64 step counter of shape (1,), advanced by the call."""
    fn = "adam_step"
    check_device(fn, device)
    check_array(fn, "param", param, device)
    for name, arr in (("grad", grad), ("m", m), ("v", v)):
        check_array(fn, name, arr, device, shape=param.shape, dtype=param.dtype)
    check_array(fn, "t", t, device, shape=(1,), dtype=np.int64)
    return (device, param, grad, m, v, t,
            check_number(fn, "lr", lr, 0, low_open=True),
            check_number(fn, "beta1", beta1, 0, 1, high_open=True),
            check_number(fn, "beta2", beta2, 0, 1, high_open=True),
            check_number(fn, "eps", eps, 0, low_open=True))


@generic(inplace=("target",), may_alias={"target": ("source",)})
def polyak_update(device, target, source, polyak):
    """``target = polyak * target + (1 - polyak) * source`` (RLtools/TD3 target networks)."""
    check_device("polyak_update", device)
    check_array("polyak_update", "target", target, device)
    check_array("polyak_update", "source", source, device, shape=target.shape, dtype=target.dtype)
    return device, target, source, check_number("polyak_update", "polyak", polyak, 0, 1)


@generic(outputs=("out",))
def fill(device, out, value):
    """``out[...] = value``."""
    check_device("fill", device)
    check_array("fill", "out", out, device, dtypes=None)
    return device, out, check_number("fill", "value", value)


@generic(outputs=("dst",))
def copy(device, src, dst):
    """``dst[...] = src`` (same shape and dtype, same device)."""
    check_device("copy", device)
    check_array("copy", "src", src, device, dtypes=None)
    check_array("copy", "dst", dst, device, shape=src.shape, dtype=src.dtype)
    return device, src, dst


def _check_rng(fn, device, rng, out):
    check_device(fn, device)
    check_array(fn, "rng", rng, device, shape=(2,), dtype=np.uint64)
    check_array(fn, "out", out, device)


@generic(inplace=("rng",), outputs=("out",))
def random_uniform(device, rng, out, low=0.0, high=1.0):
    """Fill ``out`` with uniform samples in [low, high) from the counter-based stream ``rng``
    (see :func:`dispatchrl.rng`): the same seed gives the same numbers on every device."""
    _check_rng("random_uniform", device, rng, out)
    low = check_number("random_uniform", "low", low)
    return device, rng, out, low, check_number("random_uniform", "high", high, low)


@generic(inplace=("rng",), outputs=("out",))
def random_normal(device, rng, out, mean=0.0, std=1.0):
    """Fill ``out`` with normal samples (Box–Muller over the counter-based stream ``rng``)."""
    _check_rng("random_normal", device, rng, out)
    return (device, rng, out, check_number("random_normal", "mean", mean),
            check_number("random_normal", "std", std, 0))


def rng(device, seed):
    """A counter-based random stream for ``seed`` on ``device``: uint64 ``[key, counter]``.

    Sample ``i`` of the stream is a SplitMix64 hash of ``(key, counter + i)``, so every backend
    draws the same numbers and a fused step carries its RNG state as an ordinary array.
    """
    from ..arrays import asarray

    check_device("rng", device)
    if not isinstance(seed, (int, np.integer)) or not 0 <= int(seed) < 2**63:
        raise ConfigError(f"rng: argument 'seed' must be an int in [0, 2**63), got {seed!r}")
    z = (int(seed) + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return asarray(device, np.array([z ^ (z >> 31), 0], dtype=np.uint64))


@generic(inplace=("counter",))
def increment(device, counter, amount=1):
    """``counter[0] += amount`` on an int64 (1,) counter (step counts that fused steps branch on)."""
    check_device("increment", device)
    check_array("increment", "counter", counter, device, shape=(1,), dtype=np.int64)
    if not isinstance(amount, (int, np.integer)):
        raise ConfigError(f"increment: argument 'amount' must be an int, got {amount!r}")
    return device, counter, int(amount)
