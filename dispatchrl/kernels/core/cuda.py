"""CUDA methods of the core generic functions: numba.cuda kernels, one thread per output element.

Methods pick the launch configuration from the static shapes and hand a
:class:`~dispatchrl.backends.cuda.Launch` to :func:`launch`. Each kernel also has a block-level form
(:func:`~dispatchrl.backends.cuda.block_form`), the same per-element body in block-stride loops,
which a fused step calls inside its one single-block kernel."""

import math

import numpy as np
from numba import cuda

from ...activation import Activation
from ...arrays import Array
from ...backends.cuda import MAX_FUSED_BLOCK, REDUCE_THREADS, Launch, block_form, flat, launch_1d, launch_2d
from ...devices import CUDA
from ...staging import launch
from . import api
from .api import INV_SQRT_2PI, SQRT_HALF

__all__ = ["adam_update", "increment_kernel"]


@cuda.jit(device=True)
def _activate(v, code):
    if code == Activation.RELU:
        return v if v > 0 else 0.0
    if code == Activation.TANH:
        return math.tanh(v)
    if code == Activation.GELU:
        return 0.5 * v * (1.0 + math.erf(v * SQRT_HALF))
    return v


@cuda.jit(device=True)
def _activation_derivative(pre, out, code):
    if code == Activation.RELU:
        return 1.0 if pre > 0 else 0.0
    if code == Activation.TANH:
        return 1.0 - out * out
    if code == Activation.GELU:
        return 0.5 * (1.0 + math.erf(pre * SQRT_HALF)) + pre * math.exp(-0.5 * pre * pre) * INV_SQRT_2PI
    return 1.0


@cuda.jit
def activation_kernel(x, out, code):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = _activate(x[i], code)


@block_form(activation_kernel, lambda x, out, code: (x.size,))
@cuda.jit(device=True)
def activation_block(x, out, code, size):
    for i in range(cuda.threadIdx.x, size, cuda.blockDim.x):
        out[i] = _activate(x[i], code)


def _activation_method(activation):
    def method(device: CUDA, x, out):
        launch_1d(device, activation_kernel, x.size, flat(x), flat(out), int(activation))

    return method


api.register_activation_methods(_activation_method)


@cuda.jit(device=True)
def _matmul_at(i, j, a, b, out, inner):
    acc = 0.0
    for p in range(inner):
        acc += a[i, p] * b[p, j]
    out[i, j] = acc


@cuda.jit
def matmul_kernel(a, b, out):
    i, j = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        _matmul_at(i, j, a, b, out, a.shape[1])


@block_form(matmul_kernel, lambda a, b, out: (out.shape[0], out.shape[1], a.shape[1]))
@cuda.jit(device=True)
def matmul_block(a, b, out, rows, cols, inner):
    # consecutive threads take consecutive columns: coalesced reads of b and writes of out
    for k in range(cuda.threadIdx.x, rows * cols, cuda.blockDim.x):
        _matmul_at(k // cols, k % cols, a, b, out, inner)


@api.matmul.dispatch
def matmul(device: CUDA, a, b, out):
    launch_2d(device, matmul_kernel, out.shape, a, b, out)


@cuda.jit(device=True)
def _dense_forward_at(i, j, x, W, b, pre, out, code, inner):
    acc = b[j] + 0.0
    for p in range(inner):
        acc += x[i, p] * W[p, j]
    pre[i, j] = acc
    out[i, j] = _activate(acc, code)


@cuda.jit
def dense_forward_kernel(x, W, b, pre, out, code):
    i, j = cuda.grid(2)
    if i < pre.shape[0] and j < pre.shape[1]:
        _dense_forward_at(i, j, x, W, b, pre, out, code, x.shape[1])


@block_form(dense_forward_kernel, lambda x, W, b, pre, out, code: (pre.shape[0], pre.shape[1], x.shape[1]))
@cuda.jit(device=True)
def dense_forward_block(x, W, b, pre, out, code, rows, cols, inner):
    for k in range(cuda.threadIdx.x, rows * cols, cuda.blockDim.x):
        _dense_forward_at(k // cols, k % cols, x, W, b, pre, out, code, inner)


@api.dense_forward.dispatch
def dense_forward(device: CUDA, x, W, b, pre, out, activation):
    launch_2d(device, dense_forward_kernel, pre.shape, x, W, b, pre, out, int(activation))


@cuda.jit
def activation_backward_kernel(pre, out, d_out, d_pre, code):
    i = cuda.grid(1)
    if i < pre.size:
        d_pre[i] = d_out[i] * _activation_derivative(pre[i], out[i], code)


@block_form(activation_backward_kernel, lambda pre, out, d_out, d_pre, code: (pre.size,))
@cuda.jit(device=True)
def activation_backward_block(pre, out, d_out, d_pre, code, size):
    for i in range(cuda.threadIdx.x, size, cuda.blockDim.x):
        d_pre[i] = d_out[i] * _activation_derivative(pre[i], out[i], code)


@cuda.jit(device=True)
def _weight_gradient_at(p, j, x, d_pre, dW, batch):
    acc = 0.0
    for i in range(batch):
        acc += x[i, p] * d_pre[i, j]
    dW[p, j] = acc


@cuda.jit
def weight_gradient_kernel(x, d_pre, dW):
    p, j = cuda.grid(2)
    if p < dW.shape[0] and j < dW.shape[1]:
        _weight_gradient_at(p, j, x, d_pre, dW, x.shape[0])


@block_form(weight_gradient_kernel, lambda x, d_pre, dW: (dW.shape[0], dW.shape[1], x.shape[0]))
@cuda.jit(device=True)
def weight_gradient_block(x, d_pre, dW, rows, cols, batch):
    for k in range(cuda.threadIdx.x, rows * cols, cuda.blockDim.x):
        _weight_gradient_at(k // cols, k % cols, x, d_pre, dW, batch)


@cuda.jit(device=True)
def _bias_gradient_at(j, d_pre, db, batch):
    acc = 0.0
    for i in range(batch):
        acc += d_pre[i, j]
    db[j] = acc


@cuda.jit
def bias_gradient_kernel(d_pre, db):
    j = cuda.grid(1)
    if j < db.size:
        _bias_gradient_at(j, d_pre, db, d_pre.shape[0])


@block_form(bias_gradient_kernel, lambda d_pre, db: (db.size, d_pre.shape[0]))
@cuda.jit(device=True)
def bias_gradient_block(d_pre, db, size, batch):
    for j in range(cuda.threadIdx.x, size, cuda.blockDim.x):
        _bias_gradient_at(j, d_pre, db, batch)


@cuda.jit(device=True)
def _input_gradient_at(i, p, d_pre, W, d_x, width):
    acc = 0.0
    for j in range(width):
        acc += d_pre[i, j] * W[p, j]
    d_x[i, p] = acc


@cuda.jit
def input_gradient_kernel(d_pre, W, d_x):
    i, p = cuda.grid(2)
    if i < d_x.shape[0] and p < d_x.shape[1]:
        _input_gradient_at(i, p, d_pre, W, d_x, d_pre.shape[1])


@block_form(input_gradient_kernel, lambda d_pre, W, d_x: (d_x.shape[0], d_x.shape[1], d_pre.shape[1]))
@cuda.jit(device=True)
def input_gradient_block(d_pre, W, d_x, rows, cols, width):
    for k in range(cuda.threadIdx.x, rows * cols, cuda.blockDim.x):
        _input_gradient_at(k // cols, k % cols, d_pre, W, d_x, width)


@api.dense_backward.dispatch
def dense_backward(device: CUDA, x, W, pre, out, d_out, d_pre, dW, db, d_x, activation):
    launch_1d(
        device, activation_backward_kernel, pre.size, flat(pre), flat(out), flat(d_out), flat(d_pre), int(activation)
    )
    launch_2d(device, weight_gradient_kernel, dW.shape, x, d_pre, dW)
    launch_1d(device, bias_gradient_kernel, db.size, d_pre, db)
    if d_x is not None:
        launch_2d(device, input_gradient_kernel, d_x.shape, d_pre, W, d_x)


@api.dense_input_gradient.dispatch
def dense_input_gradient(device: CUDA, W, pre, out, d_out, d_pre, d_x, activation):
    launch_1d(
        device, activation_backward_kernel, pre.size, flat(pre), flat(out), flat(d_out), flat(d_pre), int(activation)
    )
    launch_2d(device, input_gradient_kernel, d_x.shape, d_pre, W, d_x)


@cuda.jit(device=True)
def mse_loss_block(pred, target, loss, size):
    """The mean squared error by one block of any power-of-two size up to MAX_FUSED_BLOCK."""
    partial = cuda.shared.array(MAX_FUSED_BLOCK, dtype=np.float64)
    tid = cuda.threadIdx.x
    threads = cuda.blockDim.x
    acc = 0.0
    for i in range(tid, size, threads):
        d = np.float64(pred[i]) - np.float64(target[i])
        acc += d * d
    partial[tid] = acc
    cuda.syncthreads()
    stride = threads // 2
    while stride > 0:
        if tid < stride:
            partial[tid] += partial[tid + stride]
        cuda.syncthreads()
        stride //= 2
    if tid == 0:
        loss[0] = partial[0] / size


@cuda.jit
def mse_loss_kernel(pred, target, loss):
    mse_loss_block(pred, target, loss, pred.size)


block_form(mse_loss_kernel, lambda pred, target, loss: (pred.size,))(mse_loss_block)


@api.mse_loss.dispatch
def mse_loss(device: CUDA, pred, target, loss):
    launch(device, Launch(mse_loss_kernel, (1,), (REDUCE_THREADS,)), flat(pred), flat(target), loss)


@cuda.jit
def mse_gradient_kernel(pred, target, d_pred):
    i = cuda.grid(1)
    if i < pred.size:
        d_pred[i] = (pred[i] - target[i]) * (2.0 / pred.size)


@block_form(mse_gradient_kernel, lambda pred, target, d_pred: (pred.size,))
@cuda.jit(device=True)
def mse_gradient_block(pred, target, d_pred, size):
    for i in range(cuda.threadIdx.x, size, cuda.blockDim.x):
        d_pred[i] = (pred[i] - target[i]) * (2.0 / size)


@api.mse_gradient.dispatch
def mse_gradient(device: CUDA, pred, target, d_pred):
    launch_1d(device, mse_gradient_kernel, pred.size, flat(pred), flat(target), flat(d_pred))


@cuda.jit(device=True)
def adam_update(i, param, grad, m, v, step, lr, beta1, beta2, eps):
    """Adam on element i at step ``step`` (the counter's value after this update)."""
    g = grad[i]
    m[i] = beta1 * m[i] + (1 - beta1) * g
    v[i] = beta2 * v[i] + (1 - beta2) * g * g
    param[i] -= lr * (m[i] / (1.0 - beta1**step)) / (math.sqrt(v[i] / (1.0 - beta2**step)) + eps)


@cuda.jit
def adam_step_kernel(param, grad, m, v, t, lr, beta1, beta2, eps):
    i = cuda.grid(1)
    if i < param.size:
        # the counter itself advances in increment_kernel, after every thread read it
        adam_update(i, param, grad, m, v, t[0] + 1, lr, beta1, beta2, eps)


@cuda.jit
def adam_step_lr_array_kernel(param, grad, m, v, t, lr, beta1, beta2, eps):
    i = cuda.grid(1)
    if i < param.size:
        adam_update(i, param, grad, m, v, t[0] + 1, lr[0], beta1, beta2, eps)


def _adam_sizes(param, grad, m, v, t, lr, beta1, beta2, eps) -> tuple:
    return (param.size,)


@block_form(adam_step_kernel, _adam_sizes)
@cuda.jit(device=True)
def adam_step_block(param, grad, m, v, t, lr, beta1, beta2, eps, size):
    step = t[0] + 1  # the counter advances in the increment after this call's barrier
    for i in range(cuda.threadIdx.x, size, cuda.blockDim.x):
        adam_update(i, param, grad, m, v, step, lr, beta1, beta2, eps)


@block_form(adam_step_lr_array_kernel, _adam_sizes)
@cuda.jit(device=True)
def adam_step_lr_array_block(param, grad, m, v, t, lr, beta1, beta2, eps, size):
    step = t[0] + 1
    rate = lr[0]
    for i in range(cuda.threadIdx.x, size, cuda.blockDim.x):
        adam_update(i, param, grad, m, v, step, rate, beta1, beta2, eps)


@cuda.jit
def increment_kernel(counter, index, amount):
    if cuda.grid(1) == 0:
        counter[index] += amount


@block_form(increment_kernel)
@cuda.jit(device=True)
def increment_block(counter, index, amount):
    if cuda.threadIdx.x == 0:
        counter[index] += amount


@api.adam_step.dispatch
def adam_step(device: CUDA, param, grad, m, v, t, lr, beta1, beta2, eps):
    launch_1d(device, adam_step_kernel, param.size, flat(param), flat(grad), flat(m), flat(v), t, lr, beta1, beta2, eps)
    launch(device, Launch(increment_kernel, (1,), (1,)), t, 0, 1)


@api.adam_step.dispatch
def adam_step(device: CUDA, param, grad, m, v, t, lr: Array, beta1, beta2, eps):
    launch_1d(
        device,
        adam_step_lr_array_kernel,
        param.size,
        flat(param),
        flat(grad),
        flat(m),
        flat(v),
        t,
        lr,
        beta1,
        beta2,
        eps,
    )
    launch(device, Launch(increment_kernel, (1,), (1,)), t, 0, 1)


@cuda.jit
def polyak_update_kernel(target, source, polyak):
    i = cuda.grid(1)
    if i < target.size:
        target[i] = polyak * target[i] + (1 - polyak) * source[i]


@block_form(polyak_update_kernel, lambda target, source, polyak: (target.size,))
@cuda.jit(device=True)
def polyak_update_block(target, source, polyak, size):
    for i in range(cuda.threadIdx.x, size, cuda.blockDim.x):
        target[i] = polyak * target[i] + (1 - polyak) * source[i]


@api.polyak_update.dispatch
def polyak_update(device: CUDA, target, source, polyak):
    launch_1d(device, polyak_update_kernel, target.size, flat(target), flat(source), polyak)


@cuda.jit
def fill_kernel(out, value):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = value


@block_form(fill_kernel, lambda out, value: (out.size,))
@cuda.jit(device=True)
def fill_block(out, value, size):
    for i in range(cuda.threadIdx.x, size, cuda.blockDim.x):
        out[i] = value


@api.fill.dispatch
def fill(device: CUDA, out, value):
    launch_1d(device, fill_kernel, out.size, flat(out), value)


@cuda.jit
def copy_kernel(src, dst):
    i = cuda.grid(1)
    if i < src.size:
        dst[i] = src[i]


@block_form(copy_kernel, lambda src, dst: (src.size,))
@cuda.jit(device=True)
def copy_block(src, dst, size):
    for i in range(cuda.threadIdx.x, size, cuda.blockDim.x):
        dst[i] = src[i]


@api.copy.dispatch
def copy(device: CUDA, src, dst):
    launch_1d(device, copy_kernel, src.size, flat(src), flat(dst))


@api.increment.dispatch
def increment(device: CUDA, counter, amount):
    launch(device, Launch(increment_kernel, (1,), (1,)), counter, 0, amount)


@cuda.jit
def nonfinite_flag_kernel(x, flag, code):
    # one thread per element; a racy write is fine while every writer writes the same code, and
    # the flag is only set when it was 0 before the launch (read once, by every thread)
    i = cuda.grid(1)
    if i < x.size and flag[0] == 0 and not math.isfinite(x[i]):
        flag[0] = code


@block_form(nonfinite_flag_kernel, lambda x, flag, code: (x.size,))
@cuda.jit(device=True)
def nonfinite_flag_block(x, flag, code, size):
    # a thread may see another's write and skip its own: the flag ends the same
    for i in range(cuda.threadIdx.x, size, cuda.blockDim.x):
        if flag[0] == 0 and not math.isfinite(x[i]):
            flag[0] = code


@api.nonfinite_flag.dispatch
def nonfinite_flag(device: CUDA, x, flag, code):
    launch_1d(device, nonfinite_flag_kernel, x.size, flat(x), flag, code)
