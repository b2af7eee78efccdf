"""Declarations of the core generic functions: their contract, checked before any method runs.

Each declaration validates devices, dtypes and static shapes, raising a dispatchrl error that
names the argument, and returns the positional arguments the device methods receive. Methods
live in one module per backend: ``generic.py`` (numpy), ``cpu.py`` (Numba), ``cuda.py``, ``c.py``.
Activation arguments arrive as names or :class:`Activation` members; methods receive the member.
"""

import numpy as np

from ...activation import ACTIVATIONS, Activation
from ...arrays import Array
from ...checks import check_activation, check_array, check_device, check_number
from ...dispatch import generic
from ...errors import ConfigError

__all__ = [
    "ACTIVATIONS",
    "ACTIVATION_FUNCTIONS",
    "GRAD_NORM_EPS",
    "INV_SQRT_2PI",
    "SQRT_HALF",
    "Activation",
    "accumulate_squared_norm",
    "adam_step",
    "argmax",
    "clip",
    "clip_by_norm",
    "copy",
    "dense_backward",
    "dense_forward",
    "dense_input_gradient",
    "fill",
    "gelu",
    "identity",
    "increment",
    "linear_schedule",
    "matmul",
    "mse_gradient",
    "mse_loss",
    "nonfinite_flag",
    "polyak_update",
    "register_activation_methods",
    "relu",
    "tanh",
    "weight_decay_step",
]

#: GELU's constants: x Φ(x) = x (1 + erf(x SQRT_HALF)) / 2, Φ'(x) = INV_SQRT_2PI exp(-x²/2)
SQRT_HALF = 0.7071067811865476
INV_SQRT_2PI = 0.3989422804014327
#: torch's ``clip_grad_norm_`` divides by the norm plus this
GRAD_NORM_EPS = 1e-6


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

#: the elementwise generic function of each activation
ACTIVATION_FUNCTIONS = {
    Activation.IDENTITY: identity,
    Activation.RELU: relu,
    Activation.TANH: tanh,
    Activation.GELU: gelu,
}


def register_activation_methods(method_for) -> None:
    """Register ``method_for(activation)`` as a backend's method of each activation's generic
    function (``relu(device, x, out)`` ...)."""
    for activation, fn in ACTIVATION_FUNCTIONS.items():
        fn.dispatch(method_for(activation))


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
    for name, arr, shape in (
        ("pre", pre, (batch, n_out)),
        ("out", out, (batch, n_out)),
        ("d_out", d_out, (batch, n_out)),
        ("d_pre", d_pre, (batch, n_out)),
        ("dW", dW, W.shape),
        ("db", db, (n_out,)),
    ):
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
    int64 step counter of shape (1,), advanced by the call. ``lr`` is a number, or a float64 (1,)
    Array read when the step runs (so a schedule inside a fused step, such as
    ``adaptive_learning_rate``, takes effect); methods dispatch on which."""
    fn = "adam_step"
    check_device(fn, device)
    check_array(fn, "param", param, device)
    for name, arr in (("grad", grad), ("m", m), ("v", v)):
        check_array(fn, name, arr, device, shape=param.shape, dtype=param.dtype)
    check_array(fn, "t", t, device, shape=(1,), dtype=np.int64)
    if isinstance(lr, Array):
        check_array(fn, "lr", lr, device, shape=(1,), dtype=np.float64)
    else:
        lr = check_number(fn, "lr", lr, 0, low_open=True)
    return (
        device,
        param,
        grad,
        m,
        v,
        t,
        lr,
        check_number(fn, "beta1", beta1, 0, 1, high_open=True),
        check_number(fn, "beta2", beta2, 0, 1, high_open=True),
        check_number(fn, "eps", eps, 0, low_open=True),
    )


@generic(inplace=("target",), may_alias={"target": ("source",)})
def polyak_update(device, target, source, polyak):
    """``target = polyak * target + (1 - polyak) * source`` (RLtools/TD3 target networks)."""
    check_device("polyak_update", device)
    check_array("polyak_update", "target", target, device)
    check_array("polyak_update", "source", source, device, shape=target.shape, dtype=target.dtype)
    return device, target, source, check_number("polyak_update", "polyak", polyak, 0, 1)


@generic(inplace=("param",))
def weight_decay_step(device, param, decay):
    """``param -= decay * param``: RLtools' Adam weight decay, which it applies to weights only,
    decoupled from the gradient moments and not scaled by the learning rate (its update adds
    ``param * weight_decay / 2``, so ``decay`` is half its coefficient)."""
    check_device("weight_decay_step", device)
    check_array("weight_decay_step", "param", param, device)
    return device, param, check_number("weight_decay_step", "decay", decay, 0, 1)


@generic(inplace=("total",))
def accumulate_squared_norm(device, x, total):
    """``total[0] += Σ x²``, summed in float64 in index order: the first half of gradient-norm
    clipping over several arrays (zero ``total``, add each array's, then :func:`clip_by_norm`
    each)."""
    fn = "accumulate_squared_norm"
    check_device(fn, device)
    check_array(fn, "x", x, device)
    check_array(fn, "total", total, device, shape=(1,), dtype=np.float64)
    return device, x, total


@generic(inplace=("x",))
def clip_by_norm(device, x, total, max_norm):
    """``x *= max_norm / (√total[0] + 1e-6)`` where that factor is below 1, with ``total`` the
    squared norm :func:`accumulate_squared_norm` summed over every array clipped together:
    torch's ``clip_grad_norm_`` (Stable-Baselines3's and Tianshou's ``max_grad_norm``)."""
    fn = "clip_by_norm"
    check_device(fn, device)
    check_array(fn, "x", x, device)
    check_array(fn, "total", total, device, shape=(1,), dtype=np.float64)
    return device, x, total, check_number(fn, "max_norm", max_norm, 0, low_open=True)


@generic(outputs=("out",))
def linear_schedule(device, counter, total, start, end, out):
    """``out[0] = start + (end - start) · min(counter[0] / total, 1)``: a rate annealed linearly
    over ``total`` counts of ``counter`` (an int64 (1,) step count) and then held, read when the
    step runs (e.g. ``adam_step``'s array ``lr``; Tianshou's ``lr_decay``, Stable-Baselines3's
    linear schedules)."""
    fn = "linear_schedule"
    check_device(fn, device)
    check_array(fn, "counter", counter, device, shape=(1,), dtype=np.int64)
    check_array(fn, "out", out, device, shape=(1,), dtype=np.float64)
    total = check_number(fn, "total", total, 0, low_open=True)
    return device, counter, total, check_number(fn, "start", start), check_number(fn, "end", end), out


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


@generic(outputs=("out",), may_alias={"out": ("x",)})
def clip(device, x, low, high, out):
    """``out = min(max(x, low), high)`` elementwise (a Gaussian policy's mean clipped to its
    action range)."""
    check_device("clip", device)
    check_array("clip", "x", x, device)
    check_array("clip", "out", out, device, shape=x.shape, dtype=x.dtype)
    low = check_number("clip", "low", low)
    return device, x, low, check_number("clip", "high", high, low), out


@generic(outputs=("out",))
def argmax(device, x, out):
    """``out[i, 0]`` = the column of row ``i``'s first largest value (numpy's ``argmax(axis=1)``
    on finite rows), held as a float like every action: a Discrete space's greedy action."""
    check_device("argmax", device)
    check_array("argmax", "x", x, device, shape=(None, None))
    check_array("argmax", "out", out, device, shape=(x.shape[0], 1), dtype=x.dtype)
    return device, x, out


@generic(inplace=("counter",))
def increment(device, counter, amount=1):
    """``counter[0] += amount`` on an int64 (1,) counter (step counts that fused steps branch on)."""
    check_device("increment", device)
    check_array("increment", "counter", counter, device, shape=(1,), dtype=np.int64)
    if not isinstance(amount, (int, np.integer)):
        raise ConfigError(f"increment: argument 'amount' must be an int, got {amount!r}")
    return device, counter, int(amount)


@generic(inplace=("flag",))
def nonfinite_flag(device, x, flag, code):
    """Divergence detection: ``flag[0] = code`` if ``flag[0] == 0`` and ``x`` holds a NaN or inf.
    ``flag`` is an int64 (1,) Array; the first quantity found non-finite keeps its code (> 0).
    Reads ``x`` only, so a fused step's numerics do not change."""
    fn = "nonfinite_flag"
    check_device(fn, device)
    check_array(fn, "x", x, device)
    check_array(fn, "flag", flag, device, shape=(1,), dtype=np.int64)
    if isinstance(code, bool) or not isinstance(code, (int, np.integer)) or not 0 < code < 2**31:
        raise ConfigError(f"{fn}: argument 'code' must be an int in [1, 2**31), got {code!r}")
    return device, x, flag, int(code)
