"""CUDA methods of the random-number generic functions, and the device twins of the CPU stream
helpers (``uniform01``, ``standard_normal``, ``standard_normal_icdf``) that other families' CUDA kernels call; the
kernels are generated from the CPU element bodies."""

import numpy as np

from ...backends.cuda import Launch, device_twin, flat, launch_1d, per_index
from ...devices import CUDA
from ...staging import launch
from ..core.cuda import increment_kernel
from . import api, cpu

__all__ = ["standard_normal", "standard_normal_icdf", "uniform01"]

splitmix64 = device_twin(cpu.splitmix64)
uniform01 = device_twin(cpu.uniform01, splitmix64=splitmix64)
standard_normal = device_twin(cpu.standard_normal, uniform01=uniform01)
normal_quantile = device_twin(cpu.normal_quantile, quintic=device_twin(cpu.quintic))
standard_normal_icdf = device_twin(cpu.standard_normal_icdf, splitmix64=splitmix64, normal_quantile=normal_quantile)


random_uniform_kernel = per_index(cpu.random_uniform_at, "out.size", uniform01=uniform01)


@api.random_uniform.dispatch
def random_uniform(device: CUDA, rng, out, low, high):
    launch_1d(device, random_uniform_kernel, out.size, rng, flat(out), low, high, api.uniform_top(out.dtype, low, high))
    launch(device, Launch(increment_kernel, (1,), (1,)), rng, 1, np.uint64(out.size))


random_normal_kernel = per_index(cpu.random_normal_at, "out.size", uniform01=uniform01)


@api.random_normal.dispatch
def random_normal(device: CUDA, rng, out, mean, std):
    launch_1d(device, random_normal_kernel, out.size, rng, flat(out), mean, std)
    launch(device, Launch(increment_kernel, (1,), (1,)), rng, 1, np.uint64(2 * out.size))
