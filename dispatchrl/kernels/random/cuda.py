"""CUDA methods of the random-number generic functions, and the device twins of the CPU stream
helpers (``uniform01``, ``standard_normal``) that other families' CUDA kernels call."""

import math

import numpy as np
from numba import cuda

from ...backends.cuda import Launch, block_form, device_twin, flat, launch_1d
from ...devices import CUDA
from ...staging import launch
from ..core.cuda import increment_kernel
from . import api, cpu

__all__ = ["standard_normal", "uniform01"]

uniform01 = device_twin(cpu.uniform01)
standard_normal = device_twin(cpu.standard_normal, uniform01=uniform01)


@cuda.jit(device=True)
def _random_uniform_at(i, rng, out, low, high, top):
    out[i] = low + (high - low) * uniform01(rng[0], rng[1] + np.uint64(i))
    if out[i] > top:  # rounded up to high in out's dtype (api.uniform_top)
        out[i] = top


@cuda.jit
def random_uniform_kernel(rng, out, low, high, top):
    i = cuda.grid(1)
    if i < out.size:
        _random_uniform_at(i, rng, out, low, high, top)


@block_form(random_uniform_kernel, lambda rng, out, low, high, top: (out.size,))
@cuda.jit(device=True)
def random_uniform_block(rng, out, low, high, top, size):
    for i in range(cuda.threadIdx.x, size, cuda.blockDim.x):
        _random_uniform_at(i, rng, out, low, high, top)


@api.random_uniform.dispatch
def random_uniform(device: CUDA, rng, out, low, high):
    launch_1d(device, random_uniform_kernel, out.size, rng, flat(out), low, high, api.uniform_top(out.dtype, low, high))
    launch(device, Launch(increment_kernel, (1,), (1,)), rng, 1, np.uint64(out.size))


@cuda.jit(device=True)
def _random_normal_at(i, rng, out, mean, std):
    u1 = uniform01(rng[0], rng[1] + np.uint64(2 * i))
    u2 = uniform01(rng[0], rng[1] + np.uint64(2 * i + 1))
    out[i] = mean + std * math.sqrt(-2.0 * math.log(1.0 - u1)) * math.cos(2.0 * math.pi * u2)


@cuda.jit
def random_normal_kernel(rng, out, mean, std):
    i = cuda.grid(1)
    if i < out.size:
        _random_normal_at(i, rng, out, mean, std)


@block_form(random_normal_kernel, lambda rng, out, mean, std: (out.size,))
@cuda.jit(device=True)
def random_normal_block(rng, out, mean, std, size):
    for i in range(cuda.threadIdx.x, size, cuda.blockDim.x):
        _random_normal_at(i, rng, out, mean, std)


@api.random_normal.dispatch
def random_normal(device: CUDA, rng, out, mean, std):
    launch_1d(device, random_normal_kernel, out.size, rng, flat(out), mean, std)
    launch(device, Launch(increment_kernel, (1,), (1,)), rng, 1, np.uint64(2 * out.size))
