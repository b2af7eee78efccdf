"""Generic (numpy) methods: the reference every other backend is compared with, and the
fallback for devices without a specific method."""

import math

import numpy as np
from scipy.special import erf as _erf

from ..devices import Generic
from ..staging import launch
from . import api

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def _activate(pre, code):
    if code == 1:
        return np.maximum(pre, 0)
    if code == 2:
        return np.tanh(pre)
    if code == 3:
        return (0.5 * pre * (1.0 + _erf(pre / math.sqrt(2.0)))).astype(pre.dtype)
    return pre


def _activation_derivative(pre, out, code):
    if code == 1:
        return (pre > 0).astype(pre.dtype)
    if code == 2:
        return 1 - out * out
    if code == 3:
        cdf = 0.5 * (1.0 + _erf(pre / math.sqrt(2.0)))
        return (cdf + pre * np.exp(-0.5 * pre * pre) / math.sqrt(2.0 * math.pi)).astype(pre.dtype)
    return np.ones_like(pre)


def _elementwise_kernel(code):
    def kernel(x, out):
        out[...] = _activate(x, code)

    return kernel


def _elementwise_method(code):
    kernel = _elementwise_kernel(code)

    def method(device: Generic, x, out):
        launch(device, kernel, x, out)

    return method


for _fn in (api.identity, api.relu, api.tanh, api.gelu):
    _fn.dispatch(_elementwise_method(api.ACTIVATIONS[_fn.__name__]))


def matmul_kernel(a, b, out):
    np.matmul(a, b, out=out)


@api.matmul.dispatch
def matmul(device: Generic, a, b, out):
    launch(device, matmul_kernel, a, b, out)


def dense_forward_kernel(x, W, b, pre, out, code):
    np.matmul(x, W, out=pre)
    pre += b
    out[...] = _activate(pre, code)


@api.dense_forward.dispatch
def dense_forward(device: Generic, x, W, b, pre, out, activation):
    launch(device, dense_forward_kernel, x, W, b, pre, out, api.ACTIVATIONS[activation])


def dense_backward_kernel(x, W, pre, out, d_out, d_pre, dW, db, d_x, code):
    np.multiply(d_out, _activation_derivative(pre, out, code), out=d_pre)
    np.matmul(x.T, d_pre, out=dW)
    np.sum(d_pre, axis=0, out=db)
    if d_x is not None:
        np.matmul(d_pre, W.T, out=d_x)


@api.dense_backward.dispatch
def dense_backward(device: Generic, x, W, pre, out, d_out, d_pre, dW, db, d_x, activation):
    launch(device, dense_backward_kernel, x, W, pre, out, d_out, d_pre, dW, db, d_x,
           api.ACTIVATIONS[activation])


def dense_input_gradient_kernel(W, pre, out, d_out, d_pre, d_x, code):
    np.multiply(d_out, _activation_derivative(pre, out, code), out=d_pre)
    np.matmul(d_pre, W.T, out=d_x)


@api.dense_input_gradient.dispatch
def dense_input_gradient(device: Generic, W, pre, out, d_out, d_pre, d_x, activation):
    launch(device, dense_input_gradient_kernel, W, pre, out, d_out, d_pre, d_x, api.ACTIVATIONS[activation])


def mse_loss_kernel(pred, target, loss):
    diff = pred.astype(np.float64) - target
    loss[0] = np.mean(diff * diff)


@api.mse_loss.dispatch
def mse_loss(device: Generic, pred, target, loss):
    launch(device, mse_loss_kernel, pred, target, loss)


def mse_gradient_kernel(pred, target, d_pred):
    np.multiply(pred - target, 2.0 / pred.size, out=d_pred, casting="unsafe")


@api.mse_gradient.dispatch
def mse_gradient(device: Generic, pred, target, d_pred):
    launch(device, mse_gradient_kernel, pred, target, d_pred)


def adam_step_kernel(param, grad, m, v, t, lr, beta1, beta2, eps):
    t[0] += 1
    m *= beta1
    m += (1 - beta1) * grad
    v *= beta2
    v += (1 - beta2) * grad * grad
    m_hat = m / (1 - beta1 ** t[0])
    v_hat = v / (1 - beta2 ** t[0])
    param -= (lr * m_hat / (np.sqrt(v_hat) + eps)).astype(param.dtype)


@api.adam_step.dispatch
def adam_step(device: Generic, param, grad, m, v, t, lr, beta1, beta2, eps):
    launch(device, adam_step_kernel, param, grad, m, v, t, lr, beta1, beta2, eps)


def polyak_update_kernel(target, source, polyak):
    target[...] = polyak * target + (1 - polyak) * source


@api.polyak_update.dispatch
def polyak_update(device: Generic, target, source, polyak):
    launch(device, polyak_update_kernel, target, source, polyak)


def fill_kernel(out, value):
    out[...] = value


@api.fill.dispatch
def fill(device: Generic, out, value):
    launch(device, fill_kernel, out, value)


def copy_kernel(src, dst):
    dst[...] = src


@api.copy.dispatch
def copy(device: Generic, src, dst):
    launch(device, copy_kernel, src, dst)


def uniform01(rng, count):
    """``count`` uniforms in [0, 1) from the stream, advancing its counter (SplitMix64 hash)."""
    i = np.arange(count, dtype=np.uint64) + rng[1] + np.uint64(1)
    z = rng[0] + i * _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    z = z ^ (z >> np.uint64(31))
    rng[1] += np.uint64(count)
    return (z >> np.uint64(11)).astype(np.float64) * 2.0**-53


def random_uniform_kernel(rng, out, low, high):
    u = uniform01(rng, out.size).reshape(out.shape)
    out[...] = low + (high - low) * u


@api.random_uniform.dispatch
def random_uniform(device: Generic, rng, out, low, high):
    launch(device, random_uniform_kernel, rng, out, low, high)


def random_normal_kernel(rng, out, mean, std):
    u = uniform01(rng, 2 * out.size)
    radius = np.sqrt(-2.0 * np.log(1.0 - u[0::2]))
    out[...] = (mean + std * radius * np.cos(2.0 * math.pi * u[1::2])).reshape(out.shape)


@api.random_normal.dispatch
def random_normal(device: Generic, rng, out, mean, std):
    launch(device, random_normal_kernel, rng, out, mean, std)


def increment_kernel(counter, amount):
    counter[0] += amount


@api.increment.dispatch
def increment(device: Generic, counter, amount):
    launch(device, increment_kernel, counter, amount)
