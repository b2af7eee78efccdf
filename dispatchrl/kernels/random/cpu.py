"""CPU methods of the random-number generic functions, and the stream helpers (``uniform01``,
``standard_normal``) other families' CPU kernels call (their CUDA twins are compiled from this
source). No fastmath here: the streams match numpy bit for bit."""

import math

import numpy as np
from numba import njit

from ...backends.cpu import JIT_EXACT, JIT_EXACT_INNER
from ...devices import CPU
from ...staging import launch
from . import api
from .api import SPLITMIX_GOLDEN, SPLITMIX_MIX1, SPLITMIX_MIX2, UNIFORM01_SCALE

__all__ = [
    "normal_quantile",
    "quintic",
    "random_normal_at",
    "random_normal_kernel",
    "random_uniform_at",
    "random_uniform_kernel",
    "splitmix64",
    "standard_normal",
    "standard_normal_icdf",
    "uniform01",
]


@njit(**JIT_EXACT)
def splitmix64(key, counter):
    """The stream's 64 bits at position ``counter``: SplitMix64's output function."""
    z = key + (counter + np.uint64(1)) * SPLITMIX_GOLDEN
    z = (z ^ (z >> np.uint64(30))) * SPLITMIX_MIX1
    z = (z ^ (z >> np.uint64(27))) * SPLITMIX_MIX2
    return z ^ (z >> np.uint64(31))


@njit(**JIT_EXACT)
def uniform01(key, counter):
    """Uniform in [0, 1) for stream position ``counter`` (same as generic.py): the top 53 bits,
    converted as a signed integer (exact below 2**53; on x86 without AVX-512 the unsigned
    conversion is a branch and several instructions)."""
    return np.float64(np.int64(splitmix64(key, counter) >> np.uint64(11))) * UNIFORM01_SCALE


@njit(**JIT_EXACT)
def standard_normal(key, counter):
    """N(0, 1) from stream positions counter, counter + 1 (Box–Muller, as random_normal)."""
    u1 = uniform01(key, counter)
    u2 = uniform01(key, counter + np.uint64(1))
    return math.sqrt(-2.0 * math.log(1.0 - u1)) * math.cos(2.0 * math.pi * u2)


# the normal quantile's helpers are inlined (CPython wrappers kept, for tests): the multirotor
# draws 18 a step, and a call costs more than the work (backends.cpu.JIT_EXACT_INLINED)
@njit(inline="always", **JIT_EXACT)
def quintic(c, x):
    """The degree-5 polynomial with coefficients ``c`` (highest power first) at ``x``, Horner's order."""
    return ((((c[0] * x + c[1]) * x + c[2]) * x + c[3]) * x + c[4]) * x + c[5]


@njit(inline="always", **JIT_EXACT)
def normal_quantile(p):
    """The standard normal's quantile at p in (0, 1), Acklam's approximation (api)."""
    if api.NORMAL_QUANTILE_LOW <= p <= 1.0 - api.NORMAL_QUANTILE_LOW:
        q = p - 0.5
        r = q * q
        return quintic(api.NORMAL_QUANTILE_CENTRAL[0], r) * q / quintic(api.NORMAL_QUANTILE_CENTRAL[1], r)
    t = math.sqrt(-2.0 * math.log(min(p, 1.0 - p)))
    x = quintic(api.NORMAL_QUANTILE_TAIL[0], t) / quintic(api.NORMAL_QUANTILE_TAIL[1], t)
    return x if p < 0.5 else -x


@njit(inline="always", **JIT_EXACT)
def standard_normal_icdf(key, counter):
    """N(0, 1) from the one stream position ``counter``, by the normal quantile of a uniform on
    the midpoints of 2**52 cells: p in [2**-53, 1 - 2**-53], symmetric, 1 - p exact."""
    cell = np.float64(np.int64(splitmix64(key, counter) >> np.uint64(12)))  # floor(uniform01 * 2**52)
    return normal_quantile(cell * (2.0 * UNIFORM01_SCALE) + UNIFORM01_SCALE)


@njit(**JIT_EXACT_INNER)
def random_uniform_at(i, rng, out, low, high, top):
    """Element ``i`` of random_uniform (the CUDA kernels are generated from this body)."""
    out[i] = low + (high - low) * uniform01(rng[0], rng[1] + np.uint64(i))
    if out[i] > top:  # rounded up to high in the output dtype (see api.uniform_top)
        out[i] = top


@njit(**JIT_EXACT)
def random_uniform_kernel(rng, out, low, high, top):
    o = out.reshape(out.size)
    for i in range(o.size):
        random_uniform_at(i, rng, o, low, high, top)
    rng[1] = rng[1] + np.uint64(o.size)


@api.random_uniform.dispatch
def random_uniform(device: CPU, rng, out, low, high):
    launch(device, random_uniform_kernel, rng, out, low, high, api.uniform_top(out.dtype, low, high))


@njit(**JIT_EXACT_INNER)
def random_normal_at(i, rng, out, mean, std):
    """Element ``i`` of random_normal: Box–Muller over stream positions 2i, 2i + 1."""
    u1 = uniform01(rng[0], rng[1] + np.uint64(2 * i))
    u2 = uniform01(rng[0], rng[1] + np.uint64(2 * i + 1))
    out[i] = mean + std * math.sqrt(-2.0 * math.log(1.0 - u1)) * math.cos(2.0 * math.pi * u2)


@njit(**JIT_EXACT)
def random_normal_kernel(rng, out, mean, std):
    o = out.reshape(out.size)
    for i in range(o.size):
        random_normal_at(i, rng, o, mean, std)
    rng[1] = rng[1] + np.uint64(2 * o.size)


@api.random_normal.dispatch
def random_normal(device: CPU, rng, out, mean, std):
    launch(device, random_normal_kernel, rng, out, mean, std)
