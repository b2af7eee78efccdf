"""MuJoCo Hopper-v5, threaded: :class:`HopperBatch` (N MjData stepped by a pool of threads) and the
``dispatchrl/Hopper-v5`` gymnasium env. mujoco is imported only when one is made."""

from .batch import HopperBatch
from .gym import GYMNASIUM_SPEC, HopperEnv, make_hopper_vector

__all__ = ["GYMNASIUM_SPEC", "HopperBatch", "HopperEnv", "make_hopper_vector"]
