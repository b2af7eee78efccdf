"""Generic (numpy) methods of the random-number generic functions, and the vectorised stream
helpers (``uniform01``, ``standard_normal``, ``normal_quantile``) other families' Generic kernels draw from."""

import math

import numpy as np

from ...devices import Generic
from ...staging import launch
from . import api
from .api import SPLITMIX_GOLDEN, SPLITMIX_MIX1, SPLITMIX_MIX2, UNIFORM01_SCALE

__all__ = ["normal_quantile", "standard_normal", "uniform01"]


def uniform01(rng, count):
    """``count`` uniforms in [0, 1) from the stream, advancing its counter (SplitMix64 hash)."""
    i = np.arange(count, dtype=np.uint64) + rng[1] + np.uint64(1)
    z = rng[0] + i * SPLITMIX_GOLDEN
    z = (z ^ (z >> np.uint64(30))) * SPLITMIX_MIX1
    z = (z ^ (z >> np.uint64(27))) * SPLITMIX_MIX2
    z = z ^ (z >> np.uint64(31))
    rng[1] += np.uint64(count)
    return (z >> np.uint64(11)).astype(np.float64) * UNIFORM01_SCALE


def standard_normal(rng, count) -> np.ndarray:
    """``count`` N(0, 1) samples (Box–Muller, two stream positions each, as random_normal)."""
    u = uniform01(rng, 2 * count)
    return np.sqrt(-2.0 * np.log(1.0 - u[0::2])) * np.cos(2.0 * math.pi * u[1::2])


def _quintic(c, x) -> np.ndarray:
    return ((((c[0] * x + c[1]) * x + c[2]) * x + c[3]) * x + c[4]) * x + c[5]


def normal_quantile(p) -> np.ndarray:
    """The standard normal's quantile at each p in (0, 1): Acklam's approximation (api), in the
    CPU helper's order of operations, so both give the same bits."""
    q = p - 0.5
    central = _quintic(api.NORMAL_QUANTILE_CENTRAL[0], q * q) * q / _quintic(api.NORMAL_QUANTILE_CENTRAL[1], q * q)
    t = np.sqrt(-2.0 * np.log(np.minimum(p, 1.0 - p)))
    tail = _quintic(api.NORMAL_QUANTILE_TAIL[0], t) / _quintic(api.NORMAL_QUANTILE_TAIL[1], t)
    inside = (p >= api.NORMAL_QUANTILE_LOW) & (p <= 1.0 - api.NORMAL_QUANTILE_LOW)
    return np.where(inside, central, np.where(p < 0.5, tail, -tail))


def random_uniform_kernel(rng, out, low, high, top) -> None:
    u = uniform01(rng, out.size).reshape(out.shape)
    out[...] = low + (high - low) * u
    np.minimum(out, out.dtype.type(top), out=out)  # rounded up to high in out's dtype (api.uniform_top)


@api.random_uniform.dispatch
def random_uniform(device: Generic, rng, out, low, high):
    launch(device, random_uniform_kernel, rng, out, low, high, api.uniform_top(out.dtype, low, high))


def random_normal_kernel(rng, out, mean, std) -> None:
    u = uniform01(rng, 2 * out.size)
    radius = np.sqrt(-2.0 * np.log(1.0 - u[0::2]))
    out[...] = (mean + std * radius * np.cos(2.0 * math.pi * u[1::2])).reshape(out.shape)


@api.random_normal.dispatch
def random_normal(device: Generic, rng, out, mean, std):
    launch(device, random_normal_kernel, rng, out, mean, std)
