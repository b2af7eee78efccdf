"""Declarations of the random-number generic functions over the counter-based stream shared by
every device: ``rng`` makes a stream (uint64 ``[key, counter]``), sample ``i`` is a SplitMix64
hash of ``(key, counter + i)``. The SplitMix64 constants live here, once; every backend's
``uniform01`` (and the C helper text) is built from them."""

import numpy as np

from ...arrays import Array, asarray
from ...checks import check_array, check_device, check_number
from ...dispatch import generic
from ...errors import ConfigError

__all__ = [
    "NORMAL_QUANTILE_CENTRAL",
    "NORMAL_QUANTILE_LOW",
    "NORMAL_QUANTILE_TAIL",
    "SPLITMIX_GOLDEN",
    "SPLITMIX_MIX1",
    "SPLITMIX_MIX2",
    "UNIFORM01_SCALE",
    "random_normal",
    "random_uniform",
    "rng",
    "stream_key",
    "uniform_top",
]

#: SplitMix64 (Steele, Lea & Flood): the Weyl increment and the two multipliers of the finaliser
SPLITMIX_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
SPLITMIX_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
SPLITMIX_MIX2 = np.uint64(0x94D049BB133111EB)
#: the top 53 bits of a hash times 2**-53: a double in [0, 1)
UNIFORM01_SCALE = 1.0 / 9007199254740992.0
#: Acklam's rational approximation of the normal quantile (relative error below 1.15e-9): for p in
#: [LOW, 1 - LOW] x = q A(q²) / B(q²), q = p - 1/2; in the tails x = ±C(t) / D(t), t = √(-2 log p).
#: The central 95% needs no log or trig: a quarter of Box–Muller's time per normal. Each is a
#: degree-5 polynomial, highest power first (the tail's denominator padded with a 0).
NORMAL_QUANTILE_LOW = 0.02425
NORMAL_QUANTILE_CENTRAL = (
    (
        -39.69683028665376,
        220.9460984245205,
        -275.9285104469687,
        138.3577518672690,
        -30.66479806614716,
        2.506628277459239,
    ),
    (-54.47609879822406, 161.5858368580409, -155.6989798598866, 66.80131188771972, -13.28068155288572, 1.0),
)
NORMAL_QUANTILE_TAIL = (
    (
        -0.007784894002430293,
        -0.3223964580411365,
        -2.400758277161838,
        -2.549732539343734,
        4.374664141464968,
        2.938163982698783,
    ),
    (0.0, 0.007784695709041462, 0.3224671290700398, 2.445134137142996, 3.754408661907416, 1.0),  # 0 t + d0 = d0
)


def _check_rng(fn, device, rng, out):
    check_device(fn, device)
    check_array(fn, "rng", rng, device, shape=(2,), dtype=np.uint64)
    check_array(fn, "out", out, device)


def uniform_top(dtype: np.dtype, low: float, high: float) -> float:
    """The largest value of ``dtype`` below ``high`` (``low`` if there is none): a draw
    ``low + (high - low) u`` with u < 1 can still round up to ``high`` in the output dtype, and
    the kernels clamp it here so samples stay in [low, high)."""
    top = np.asarray(high, dtype)
    while float(top) >= high and float(top) > low:
        top = np.nextafter(top, np.asarray(-np.inf, dtype))
    return float(max(float(top), low))


@generic(inplace=("rng",), outputs=("out",))
def random_uniform(device, rng, out, low=0.0, high=1.0):
    """Fill ``out`` with uniform samples in [low, high) from the counter-based stream ``rng``
    (see :func:`dispatchrl.rng`): the same seed gives the same numbers on every device."""
    _check_rng("random_uniform", device, rng, out)
    low = check_number("random_uniform", "low", low)
    return device, rng, out, low, check_number("random_uniform", "high", high, low)


@generic(inplace=("rng",), outputs=("out",))
def random_normal(device, rng, out, mean=0.0, std=1.0):
    """Fill ``out`` with normal samples (Box–Muller over the counter-based stream ``rng``)."""
    _check_rng("random_normal", device, rng, out)
    return (device, rng, out, check_number("random_normal", "mean", mean), check_number("random_normal", "std", std, 0))


def rng(device, seed) -> Array:
    """A counter-based random stream for ``seed`` on ``device``: uint64 ``[key, counter]``.

    Sample ``i`` of the stream is a SplitMix64 hash of ``(key, counter + i)``, so every backend
    draws the same numbers and a fused step carries its RNG state as an ordinary array.
    """
    check_device("rng", device)
    if not isinstance(seed, (int, np.integer)) or not 0 <= int(seed) < 2**63:
        raise ConfigError(f"rng: argument 'seed' must be an int in [0, 2**63), got {seed!r}")
    return asarray(device, np.array([stream_key(int(seed)), 0], dtype=np.uint64))


def stream_key(seed: int) -> int:
    """The key of ``seed``'s stream: SplitMix64's output for ``seed`` (what :func:`rng` stores and
    the exported trainer computes in C)."""
    mask = 0xFFFFFFFFFFFFFFFF
    z = (seed + int(SPLITMIX_GOLDEN)) & mask
    z = ((z ^ (z >> 30)) * int(SPLITMIX_MIX1)) & mask
    z = ((z ^ (z >> 27)) * int(SPLITMIX_MIX2)) & mask
    return z ^ (z >> 31)
