"""C methods of the core generic functions: each emits a C99 block (a
:class:`~dispatchrl.backends.c.CKernel`) with its static shapes baked in as constants, so the
compiler sees every trip count and can unroll and vectorise. A staged step becomes one generated C
function (:mod:`dispatchrl.backends.c`); called eagerly, a kernel compiles (or loads) the one-block
step for its shapes and runs it."""

from ...activation import Activation
from ...arrays import Array
from ...backends.c import CKernel
from ...devices import C
from ...staging import launch
from . import api

__all__ = ["ACTIVATE", "DERIVATIVE", "dense_forward_kernel"]

#: activation(v) and its derivative given v = pre-activation, y = activation(v)
_SQRT_HALF, _INV_SQRT_2PI = f"(T){api.SQRT_HALF!r}", f"(T){api.INV_SQRT_2PI!r}"
ACTIVATE = {
    Activation.IDENTITY: "v",
    Activation.RELU: "(v > 0 ? v : (T)0)",
    Activation.TANH: "tanh_T(v)",
    Activation.GELU: f"(T)0.5 * v * ((T)1 + erf_T(v * {_SQRT_HALF}))",
}
DERIVATIVE = {
    Activation.IDENTITY: "(T)1",
    Activation.RELU: "(v > 0 ? (T)1 : (T)0)",
    Activation.TANH: "((T)1 - y * y)",
    Activation.GELU: f"((T)0.5 * ((T)1 + erf_T(v * {_SQRT_HALF})) + v * exp_T((T)-0.5 * v * v) * {_INV_SQRT_2PI})",
}


# --- elementwise and matrix kernels ------------------------------------------------------------

ELEMENTWISE = """
for (int i = 0; i < SIZE; i++) {
    const T v = x[i];
    out[i] = @ACTIVATE;
}
"""


def _activation_method(activation):
    def method(device: C, x, out):
        body = ELEMENTWISE.replace("@ACTIVATE", ACTIVATE[activation])
        kernel = CKernel(activation.label, body, ("x", "out"), ("out",), {"SIZE": x.size}, x.dtype, overwrites=("out",))
        launch(device, kernel, x, out)

    return method


api.register_activation_methods(_activation_method)

MATMUL = """
for (int i = 0; i < M; i++) {
    for (int j = 0; j < N; j++) out[i * N + j] = 0;
    for (int p = 0; p < K; p++) {
        const T aip = a[i * K + p];
        for (int j = 0; j < N; j++) out[i * N + j] += aip * b[p * N + j];
    }
}
"""


@api.matmul.dispatch
def matmul(device: C, a, b, out):
    (m, k), n = a.shape, b.shape[1]
    launch(device, CKernel("matmul", MATMUL, ("a", "b", "out"), ("out",), dict(M=m, K=k, N=n), a.dtype, overwrites=("out",)), a, b, out)


DENSE_FORWARD = """
for (int i = 0; i < M; i++) {
    for (int j = 0; j < N; j++) pre[i * N + j] = b[j];
    for (int p = 0; p < K; p++) {
        const T xip = x[i * K + p];
        for (int j = 0; j < N; j++) pre[i * N + j] += xip * W[p * N + j];
    }
    for (int j = 0; j < N; j++) {
        const T v = pre[i * N + j];
        out[i * N + j] = @ACTIVATE;
    }
}
"""


def dense_forward_kernel(batch, n_in, n_out, activation, dtype):
    """The C block of ``dense_forward`` over (x, W, b, pre, out); also used by the export."""
    activation = Activation.of(activation, "dense_forward_kernel")
    return CKernel(
        f"dense_forward {activation.label}",
        DENSE_FORWARD.replace("@ACTIVATE", ACTIVATE[activation]),
        ("x", "W", "b", "pre", "out"),
        ("pre", "out"),
        dict(M=batch, K=n_in, N=n_out),
        dtype,
        overwrites=("pre", "out"),
    )


@api.dense_forward.dispatch
def dense_forward(device: C, x, W, b, pre, out, activation):
    batch, n_in = x.shape
    launch(device, dense_forward_kernel(batch, n_in, W.shape[1], activation, x.dtype), x, W, b, pre, out)


DENSE_BACKWARD = """
for (int j = 0; j < N; j++) db[j] = 0;
for (int i = 0; i < M; i++) {
    for (int j = 0; j < N; j++) {
        const T v = pre[i * N + j], y = out[i * N + j];
        const T g = d_out[i * N + j] * @DERIVATIVE;
        d_pre[i * N + j] = g;
        db[j] += g;
    }
}
for (int p = 0; p < K * N; p++) dW[p] = 0;
for (int i = 0; i < M; i++) {
    for (int p = 0; p < K; p++) {
        const T xip = x[i * K + p];
        for (int j = 0; j < N; j++) dW[p * N + j] += xip * d_pre[i * N + j];
    }
}
"""

INPUT_GRADIENT = """
/* d_x[i, p] = sum_j d_pre[i, j] W[p, j], summed over j in order (the same bits on every target,
   no reassociation): W transposed once into scratch so the p loop is contiguous and vectorises */
{
    static T WT[N * K];
    for (int p = 0; p < K; p++)
        for (int j = 0; j < N; j++) WT[j * K + p] = W[p * N + j];
    for (int i = 0; i < M; i++) {
        T *restrict row = d_x + i * K;
        for (int p = 0; p < K; p++) row[p] = 0;
        for (int j = 0; j < N; j++) {
            const T g = d_pre[i * N + j];
            for (int p = 0; p < K; p++) row[p] += g * WT[j * K + p];
        }
    }
}
"""


@api.dense_backward.dispatch
def dense_backward(device: C, x, W, pre, out, d_out, d_pre, dW, db, d_x, activation):
    body = DENSE_BACKWARD.replace("@DERIVATIVE", DERIVATIVE[activation])
    params, outputs = ["x", "W", "pre", "out", "d_out", "d_pre", "dW", "db"], ["d_pre", "dW", "db"]
    args = [x, W, pre, out, d_out, d_pre, dW, db]
    if d_x is not None:
        body, params, outputs, args = body + INPUT_GRADIENT, params + ["d_x"], outputs + ["d_x"], args + [d_x]
    kernel = CKernel(
        f"dense_backward {activation.label}",
        body,
        params,
        outputs,
        dict(M=x.shape[0], K=x.shape[1], N=W.shape[1]),
        x.dtype,
        overwrites=outputs,
    )
    launch(device, kernel, *args)


ACTIVATION_GRADIENT = """
for (int i = 0; i < M * N; i++) {
    const T v = pre[i], y = out[i];
    d_pre[i] = d_out[i] * @DERIVATIVE;
}
"""


@api.dense_input_gradient.dispatch
def dense_input_gradient(device: C, W, pre, out, d_out, d_pre, d_x, activation):
    body = ACTIVATION_GRADIENT.replace("@DERIVATIVE", DERIVATIVE[activation]) + INPUT_GRADIENT
    kernel = CKernel(
        f"dense_input_gradient {activation.label}",
        body,
        ("W", "pre", "out", "d_out", "d_pre", "d_x"),
        ("d_pre", "d_x"),
        dict(M=pre.shape[0], K=W.shape[0], N=W.shape[1]),
        W.dtype,
        overwrites=("d_pre", "d_x"),
    )
    launch(device, kernel, W, pre, out, d_out, d_pre, d_x)


# --- losses and optimisers ---------------------------------------------------------------------

MSE_LOSS = """
double acc = 0;
for (int i = 0; i < SIZE; i++) {
    const double d = (double)pred[i] - (double)target[i];
    acc += d * d;
}
loss[0] = (T)(acc / SIZE);
"""


@api.mse_loss.dispatch
def mse_loss(device: C, pred, target, loss):
    launch(
        device,
        CKernel(
            "mse_loss",
            MSE_LOSS,
            ("pred", "target", "loss"),
            ("loss",),
            {"SIZE": pred.size},
            pred.dtype,
            overwrites=("loss",),
        ),
        pred,
        target,
        loss,
    )


MSE_GRADIENT = """
for (int i = 0; i < SIZE; i++) d_pred[i] = (T)((double)(pred[i] - target[i]) * (2.0 / SIZE));
"""


@api.mse_gradient.dispatch
def mse_gradient(device: C, pred, target, d_pred):
    launch(
        device,
        CKernel(
            "mse_gradient",
            MSE_GRADIENT,
            ("pred", "target", "d_pred"),
            ("d_pred",),
            {"SIZE": pred.size},
            pred.dtype,
            overwrites=("d_pred",),
        ),
        pred,
        target,
        d_pred,
    )


ADAM_STEP = """
t[0] += 1;
/* bias corrections in double, the elementwise update in T (it vectorises) */
const T b1 = (T)beta1, b2 = (T)beta2, rate = (T)lr, epsilon = (T)eps;
const T scale1 = (T)(1.0 / (1.0 - pow(beta1, (double)t[0])));
const T scale2 = (T)(1.0 / (1.0 - pow(beta2, (double)t[0])));
for (int i = 0; i < SIZE; i++) {
    const T g = grad[i];
    m[i] = b1 * m[i] + ((T)1 - b1) * g;
    v[i] = b2 * v[i] + ((T)1 - b2) * g * g;
    param[i] -= rate * (m[i] * scale1) / (sqrt_T(v[i] * scale2) + epsilon);
}
"""


@api.adam_step.dispatch
def adam_step(device: C, param, grad, m, v, t, lr, beta1, beta2, eps):
    kernel = CKernel(
        "adam_step",
        ADAM_STEP,
        ("param", "grad", "m", "v", "t", "lr", "beta1", "beta2", "eps"),
        ("param", "m", "v", "t"),
        {"SIZE": param.size},
        param.dtype,
    )
    launch(device, kernel, param, grad, m, v, t, lr, beta1, beta2, eps)


@api.adam_step.dispatch
def adam_step(device: C, param, grad, m, v, t, lr: Array, beta1, beta2, eps):
    # the learning rate read from a (1,) float64 array each step (PPO's adaptive rate changes it)
    kernel = CKernel(
        "adam_step lr array",
        ADAM_STEP.replace("rate = (T)lr,", "rate = (T)lr[0],"),
        ("param", "grad", "m", "v", "t", "lr", "beta1", "beta2", "eps"),
        ("param", "m", "v", "t"),
        {"SIZE": param.size},
        param.dtype,
    )
    launch(device, kernel, param, grad, m, v, t, lr, beta1, beta2, eps)


POLYAK_UPDATE = """
for (int i = 0; i < SIZE; i++) target[i] = (T)(polyak * target[i] + (1.0 - polyak) * source[i]);
"""


@api.polyak_update.dispatch
def polyak_update(device: C, target, source, polyak):
    launch(
        device,
        CKernel(
            "polyak_update",
            POLYAK_UPDATE,
            ("target", "source", "polyak"),
            ("target",),
            {"SIZE": target.size},
            target.dtype,
        ),
        target,
        source,
        polyak,
    )


FILL = "for (int i = 0; i < SIZE; i++) out[i] = (T)value;"


@api.fill.dispatch
def fill(device: C, out, value):
    kernel = CKernel("fill", FILL, ("out", "value"), ("out",), {"SIZE": out.size}, out.dtype, overwrites=("out",))
    launch(device, kernel, out, value)


COPY = "for (int i = 0; i < SIZE; i++) dst[i] = src[i];"


@api.copy.dispatch
def copy(device: C, src, dst):
    kernel = CKernel("copy", COPY, ("src", "dst"), ("dst",), {"SIZE": src.size}, src.dtype, overwrites=("dst",))
    launch(device, kernel, src, dst)


INCREMENT = "counter[0] += (int64_t)amount;"


@api.increment.dispatch
def increment(device: C, counter, amount):
    launch(
        device, CKernel("increment", INCREMENT, ("counter", "amount"), ("counter",), {}, counter.dtype), counter, amount
    )


# x - x is 0 for finite x and NaN for NaN or inf; NaN compares unequal to itself (no libm, and
# the C device never enables fast-math, which would fold this away)
NONFINITE_FLAG = """
if (flag[0] == 0) {
    int bad = 0;
    for (int i = 0; i < SIZE; i++) {
        const T d = x[i] - x[i];
        bad |= d != d;
    }
    if (bad) flag[0] = (int64_t)code;
}
"""


@api.nonfinite_flag.dispatch
def nonfinite_flag(device: C, x, flag, code):
    launch(
        device,
        CKernel("nonfinite_flag", NONFINITE_FLAG, ("x", "flag", "code"), ("flag",), {"SIZE": x.size}, x.dtype),
        x,
        flag,
        code,
    )
