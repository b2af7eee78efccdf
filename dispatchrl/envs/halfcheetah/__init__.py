"""MuJoCo HalfCheetah-v5, threaded: :class:`HalfCheetahBatch` (N MjData stepped by a pool of threads) and the
``dispatchrl/HalfCheetah-v5`` gymnasium env. mujoco is imported only when one is made."""

from .batch import HalfCheetahBatch
from .gym import GYMNASIUM_SPEC, HalfCheetahEnv, make_halfcheetah_vector

__all__ = ["GYMNASIUM_SPEC", "HalfCheetahBatch", "HalfCheetahEnv", "make_halfcheetah_vector"]
