"""Generic (numpy) methods: the reference every other backend is compared with, and the
fallback for devices without a specific method."""

import math

import numpy as np
from scipy.special import erf as _erf

from ...activation import Activation
from ...devices import Generic
from ...staging import launch
from . import api

__all__ = ["adam_step_kernel", "adam_step_lr_array_kernel"]


def _activate(pre, code):
    if code == Activation.RELU:
        return np.maximum(pre, 0)
    if code == Activation.TANH:
        return np.tanh(pre)
    if code == Activation.GELU:
        return (0.5 * pre * (1.0 + _erf(pre / math.sqrt(2.0)))).astype(pre.dtype)
    return pre


def _activation_derivative(pre, out, code):
    if code == Activation.RELU:
        return (pre > 0).astype(pre.dtype)
    if code == Activation.TANH:
        return 1 - out * out
    if code == Activation.GELU:
        cdf = 0.5 * (1.0 + _erf(pre / math.sqrt(2.0)))
        return (cdf + pre * np.exp(-0.5 * pre * pre) / math.sqrt(2.0 * math.pi)).astype(pre.dtype)
    return np.ones_like(pre)


def _elementwise_kernel(code):
    def kernel(x, out) -> None:
        out[...] = _activate(x, code)

    return kernel


def _elementwise_method(activation):
    kernel = _elementwise_kernel(activation)

    def method(device: Generic, x, out):
        launch(device, kernel, x, out)

    return method


api.register_activation_methods(_elementwise_method)


def matmul_kernel(a, b, out) -> None:
    np.matmul(a, b, out=out)


@api.matmul.dispatch
def matmul(device: Generic, a, b, out):
    launch(device, matmul_kernel, a, b, out)


def dense_forward_kernel(x, W, b, pre, out, code) -> None:
    np.matmul(x, W, out=pre)
    pre += b
    out[...] = _activate(pre, code)


@api.dense_forward.dispatch
def dense_forward(device: Generic, x, W, b, pre, out, activation):
    launch(device, dense_forward_kernel, x, W, b, pre, out, activation)


def dense_backward_kernel(x, W, pre, out, d_out, d_pre, dW, db, d_x, code) -> None:
    np.multiply(d_out, _activation_derivative(pre, out, code), out=d_pre)
    np.matmul(x.T, d_pre, out=dW)
    np.sum(d_pre, axis=0, out=db)
    if d_x is not None:
        np.matmul(d_pre, W.T, out=d_x)


@api.dense_backward.dispatch
def dense_backward(device: Generic, x, W, pre, out, d_out, d_pre, dW, db, d_x, activation):
    launch(device, dense_backward_kernel, x, W, pre, out, d_out, d_pre, dW, db, d_x, activation)


def dense_input_gradient_kernel(W, pre, out, d_out, d_pre, d_x, code) -> None:
    np.multiply(d_out, _activation_derivative(pre, out, code), out=d_pre)
    np.matmul(d_pre, W.T, out=d_x)


@api.dense_input_gradient.dispatch
def dense_input_gradient(device: Generic, W, pre, out, d_out, d_pre, d_x, activation):
    launch(device, dense_input_gradient_kernel, W, pre, out, d_out, d_pre, d_x, activation)


def mse_loss_kernel(pred, target, loss) -> None:
    diff = pred.astype(np.float64) - target
    loss[0] = np.mean(diff * diff)


def mse_gradient_kernel(pred, target, d_pred) -> None:
    np.multiply(pred - target, 2.0 / pred.size, out=d_pred, casting="unsafe")


def adam_step_kernel(param, grad, m, v, t, lr, beta1, beta2, eps) -> None:
    t[0] += 1
    m *= beta1
    m += (1 - beta1) * grad
    v *= beta2
    v += (1 - beta2) * grad * grad
    m_hat = m / (1 - beta1 ** t[0])
    v_hat = v / (1 - beta2 ** t[0])
    param -= (lr * m_hat / (np.sqrt(v_hat) + eps)).astype(param.dtype)


def adam_step_lr_array_kernel(param, grad, m, v, t, lr, beta1, beta2, eps) -> None:
    adam_step_kernel(param, grad, m, v, t, lr[0], beta1, beta2, eps)


def polyak_update_kernel(target, source, polyak) -> None:
    target[...] = polyak * target + (1 - polyak) * source


def weight_decay_step_kernel(param, decay) -> None:
    param -= (decay * param).astype(param.dtype)


def accumulate_squared_norm_kernel(x, total) -> None:
    total[0] += float(np.sum(np.square(x, dtype=np.float64)))


def clip_by_norm_kernel(x, total, max_norm) -> None:
    factor = max_norm / (np.sqrt(total[0]) + api.GRAD_NORM_EPS)
    if factor < 1.0:
        x *= x.dtype.type(factor)


def linear_schedule_kernel(counter, total, start, end, out) -> None:
    out[0] = start + (end - start) * min(counter[0] / total, 1.0)


def fill_kernel(out, value) -> None:
    out[...] = value


def copy_kernel(src, dst) -> None:
    dst[...] = src


def clip_kernel(x, low, high, out) -> None:
    out[...] = np.minimum(np.maximum(x, low), high)


def argmax_kernel(x, out) -> None:
    out[:, 0] = np.argmax(x, axis=1)


def increment_kernel(counter, amount) -> None:
    counter[0] += amount


def nonfinite_flag_kernel(x, flag, code) -> None:
    if flag[0] == 0 and not np.all(np.isfinite(x)):
        flag[0] = code
