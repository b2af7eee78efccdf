"""CUDA methods: numba.cuda kernels, one thread per output element.

Methods pick the launch configuration from the static shapes and hand a :class:`Launch` to
:func:`launch`, so a staged step is a prepared list of launches on device-resident arrays. Kernels
stay within the subset real numba.cuda compiles (the simulator would accept more)."""

import math
import types

import numpy as np
from numba import cuda
from numba.core.registry import CPUDispatcher

from ..devices import CUDA
from ..staging import launch
from . import api, cpu

_SQRT_HALF = 0.7071067811865476
_INV_SQRT_2PI = 0.3989422804014327

BLOCK_1D = 128
BLOCK_2D = (16, 8)
REDUCE_THREADS = 128  # one block reduces a whole array (shared memory tree)


def device_twin(cpu_function, **callees):
    """The CPU ``@njit`` helper ``cpu_function`` compiled as a CUDA device function from the same
    Python source, so the backends evaluate identical expressions and cannot drift. ``callees``
    rebinds the jitted helpers it calls to their device twins; a CPU-jitted callee left unbound is
    refused here, because real CUDA cannot call it and the simulator would not notice."""
    py = cpu_function.py_func
    scope = {**py.__globals__, **callees}
    stray = sorted(name for name in py.__code__.co_names if isinstance(scope.get(name), CPUDispatcher))
    if stray:
        raise TypeError(f"device_twin({py.__name__}): it calls CPU-jitted {', '.join(stray)}; "
                        "pass their device twins as keyword arguments")
    return cuda.jit(device=True)(types.FunctionType(py.__code__, scope, py.__name__, py.__defaults__,
                                                    py.__closure__))


def grid_1d(n):
    return ((n + BLOCK_1D - 1) // BLOCK_1D,), (BLOCK_1D,)


def grid_2d(m, n):
    bx, by = BLOCK_2D
    return ((m + bx - 1) // bx, (n + by - 1) // by), BLOCK_2D


class Launch:
    """``kernel[grid, block]`` applied at call time: the CUDA simulator's ``kernel[...]`` mutates
    and returns the kernel itself, so a configured kernel cannot be kept for later."""

    __slots__ = ("kernel", "grid", "block")

    def __init__(self, kernel, grid, block):
        self.kernel, self.grid, self.block = kernel, grid, block

    def __call__(self, *args):
        self.kernel[self.grid, self.block](*args)


def launch_1d(device, kernel, n, *args):
    launch(device, Launch(kernel, *grid_1d(n)), *args)


def launch_2d(device, kernel, shape, *args):
    launch(device, Launch(kernel, *grid_2d(*shape)), *args)


def flat(a):
    """1-D view of an Array's device buffer, for elementwise kernels."""
    return a.data.reshape(a.size)


@cuda.jit(device=True)
def _activate(v, code):
    if code == 1:
        return v if v > 0 else 0.0
    if code == 2:
        return math.tanh(v)
    if code == 3:
        return 0.5 * v * (1.0 + math.erf(v * _SQRT_HALF))
    return v


@cuda.jit(device=True)
def _activation_derivative(pre, out, code):
    if code == 1:
        return 1.0 if pre > 0 else 0.0
    if code == 2:
        return 1.0 - out * out
    if code == 3:
        return 0.5 * (1.0 + math.erf(pre * _SQRT_HALF)) + pre * math.exp(-0.5 * pre * pre) * _INV_SQRT_2PI
    return 1.0


@cuda.jit
def activation_kernel(x, out, code):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = _activate(x[i], code)


def _activation_method(code):
    def method(device: CUDA, x, out):
        launch_1d(device, activation_kernel, x.size, flat(x), flat(out), code)

    return method


for _fn in (api.identity, api.relu, api.tanh, api.gelu):
    _fn.dispatch(_activation_method(api.ACTIVATIONS[_fn.__name__]))


@cuda.jit
def matmul_kernel(a, b, out):
    i, j = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        acc = 0.0
        for p in range(a.shape[1]):
            acc += a[i, p] * b[p, j]
        out[i, j] = acc


@api.matmul.dispatch
def matmul(device: CUDA, a, b, out):
    launch_2d(device, matmul_kernel, out.shape, a, b, out)


@cuda.jit
def dense_forward_kernel(x, W, b, pre, out, code):
    i, j = cuda.grid(2)
    if i < pre.shape[0] and j < pre.shape[1]:
        acc = b[j] + 0.0
        for p in range(x.shape[1]):
            acc += x[i, p] * W[p, j]
        pre[i, j] = acc
        out[i, j] = _activate(acc, code)


@api.dense_forward.dispatch
def dense_forward(device: CUDA, x, W, b, pre, out, activation):
    launch_2d(device, dense_forward_kernel, pre.shape, x, W, b, pre, out,
           api.ACTIVATIONS[activation])


@cuda.jit
def activation_backward_kernel(pre, out, d_out, d_pre, code):
    i = cuda.grid(1)
    if i < pre.size:
        d_pre[i] = d_out[i] * _activation_derivative(pre[i], out[i], code)


@cuda.jit
def weight_gradient_kernel(x, d_pre, dW):
    p, j = cuda.grid(2)
    if p < dW.shape[0] and j < dW.shape[1]:
        acc = 0.0
        for i in range(x.shape[0]):
            acc += x[i, p] * d_pre[i, j]
        dW[p, j] = acc


@cuda.jit
def bias_gradient_kernel(d_pre, db):
    j = cuda.grid(1)
    if j < db.size:
        acc = 0.0
        for i in range(d_pre.shape[0]):
            acc += d_pre[i, j]
        db[j] = acc


@cuda.jit
def input_gradient_kernel(d_pre, W, d_x):
    i, p = cuda.grid(2)
    if i < d_x.shape[0] and p < d_x.shape[1]:
        acc = 0.0
        for j in range(d_pre.shape[1]):
            acc += d_pre[i, j] * W[p, j]
        d_x[i, p] = acc


@api.dense_backward.dispatch
def dense_backward(device: CUDA, x, W, pre, out, d_out, d_pre, dW, db, d_x, activation):
    launch_1d(device, activation_backward_kernel, pre.size, flat(pre), flat(out), flat(d_out),
           flat(d_pre), api.ACTIVATIONS[activation])
    launch_2d(device, weight_gradient_kernel, dW.shape, x, d_pre, dW)
    launch_1d(device, bias_gradient_kernel, db.size, d_pre, db)
    if d_x is not None:
        launch_2d(device, input_gradient_kernel, d_x.shape, d_pre, W, d_x)


@api.dense_input_gradient.dispatch
def dense_input_gradient(device: CUDA, W, pre, out, d_out, d_pre, d_x, activation):
    launch_1d(device, activation_backward_kernel, pre.size, flat(pre), flat(out), flat(d_out), flat(d_pre),
              api.ACTIVATIONS[activation])
    launch_2d(device, input_gradient_kernel, d_x.shape, d_pre, W, d_x)


@cuda.jit
def mse_loss_kernel(pred, target, loss):
    partial = cuda.shared.array(REDUCE_THREADS, dtype=np.float64)
    tid = cuda.threadIdx.x
    acc = 0.0
    for i in range(tid, pred.size, REDUCE_THREADS):
        d = np.float64(pred[i]) - np.float64(target[i])
        acc += d * d
    partial[tid] = acc
    cuda.syncthreads()
    stride = REDUCE_THREADS // 2
    while stride > 0:
        if tid < stride:
            partial[tid] += partial[tid + stride]
        cuda.syncthreads()
        stride //= 2
    if tid == 0:
        loss[0] = partial[0] / pred.size


@api.mse_loss.dispatch
def mse_loss(device: CUDA, pred, target, loss):
    launch(device, Launch(mse_loss_kernel, (1,), (REDUCE_THREADS,)), flat(pred), flat(target), loss)


@cuda.jit
def mse_gradient_kernel(pred, target, d_pred):
    i = cuda.grid(1)
    if i < pred.size:
        d_pred[i] = (pred[i] - target[i]) * (2.0 / pred.size)


@api.mse_gradient.dispatch
def mse_gradient(device: CUDA, pred, target, d_pred):
    launch_1d(device, mse_gradient_kernel, pred.size, flat(pred), flat(target), flat(d_pred))


@cuda.jit
def adam_step_kernel(param, grad, m, v, t, lr, beta1, beta2, eps):
    i = cuda.grid(1)
    if i < param.size:
        step = t[0] + 1  # the counter itself advances in increment_kernel, after every thread read it
        g = grad[i]
        m[i] = beta1 * m[i] + (1 - beta1) * g
        v[i] = beta2 * v[i] + (1 - beta2) * g * g
        param[i] -= lr * (m[i] / (1.0 - beta1 ** step)) / (math.sqrt(v[i] / (1.0 - beta2 ** step)) + eps)


@cuda.jit
def increment_kernel(counter, index, amount):
    if cuda.grid(1) == 0:
        counter[index] += amount


@api.adam_step.dispatch
def adam_step(device: CUDA, param, grad, m, v, t, lr, beta1, beta2, eps):
    launch_1d(device, adam_step_kernel, param.size, flat(param), flat(grad), flat(m), flat(v),
           t, lr, beta1, beta2, eps)
    launch(device, Launch(increment_kernel, (1,), (1,)), t, 0, 1)


@cuda.jit
def polyak_update_kernel(target, source, polyak):
    i = cuda.grid(1)
    if i < target.size:
        target[i] = polyak * target[i] + (1 - polyak) * source[i]


@api.polyak_update.dispatch
def polyak_update(device: CUDA, target, source, polyak):
    launch_1d(device, polyak_update_kernel, target.size, flat(target), flat(source), polyak)


@cuda.jit
def fill_kernel(out, value):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = value


@api.fill.dispatch
def fill(device: CUDA, out, value):
    launch_1d(device, fill_kernel, out.size, flat(out), value)


@cuda.jit
def copy_kernel(src, dst):
    i = cuda.grid(1)
    if i < src.size:
        dst[i] = src[i]


@api.copy.dispatch
def copy(device: CUDA, src, dst):
    launch_1d(device, copy_kernel, src.size, flat(src), flat(dst))


uniform01 = device_twin(cpu.uniform01)


@cuda.jit
def random_uniform_kernel(rng, out, low, high):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = low + (high - low) * uniform01(rng[0], rng[1] + np.uint64(i))


@api.random_uniform.dispatch
def random_uniform(device: CUDA, rng, out, low, high):
    launch_1d(device, random_uniform_kernel, out.size, rng, flat(out), low, high)
    launch(device, Launch(increment_kernel, (1,), (1,)), rng, 1, np.uint64(out.size))


@cuda.jit
def random_normal_kernel(rng, out, mean, std):
    i = cuda.grid(1)
    if i < out.size:
        u1 = uniform01(rng[0], rng[1] + np.uint64(2 * i))
        u2 = uniform01(rng[0], rng[1] + np.uint64(2 * i + 1))
        out[i] = mean + std * math.sqrt(-2.0 * math.log(1.0 - u1)) * math.cos(2.0 * math.pi * u2)


@api.random_normal.dispatch
def random_normal(device: CUDA, rng, out, mean, std):
    launch_1d(device, random_normal_kernel, out.size, rng, flat(out), mean, std)
    launch(device, Launch(increment_kernel, (1,), (1,)), rng, 1, np.uint64(2 * out.size))


@api.increment.dispatch
def increment(device: CUDA, counter, amount):
    launch(device, Launch(increment_kernel, (1,), (1,)), counter, 0, amount)
