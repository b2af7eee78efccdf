"""Random numbers: the counter-based SplitMix64 stream every device shares (``rng``,
``random_uniform``, ``random_normal``), and the per-backend stream helpers other families draw
from. CUDA methods register when a CUDA device is first made."""

from . import api, c, cpu, generic  # noqa: F401  (importing registers the methods)
from .api import random_normal, random_uniform, rng

__all__ = ["random_normal", "random_uniform", "rng"]
