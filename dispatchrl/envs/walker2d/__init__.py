"""MuJoCo Walker2d-v5, threaded: :class:`Walker2dBatch` (N MjData stepped by a pool of threads) and the
``dispatchrl/Walker2d-v5`` gymnasium env. mujoco is imported only when one is made."""

from .batch import Walker2dBatch
from .gym import GYMNASIUM_SPEC, Walker2dEnv, make_walker2d_vector

__all__ = ["GYMNASIUM_SPEC", "Walker2dBatch", "Walker2dEnv", "make_walker2d_vector"]
