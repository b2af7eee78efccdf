"""MuJoCo Humanoid-v5, threaded: :class:`HumanoidBatch` (N MjData stepped by a pool of threads) and the
``dispatchrl/Humanoid-v5`` gymnasium env. mujoco is imported only when one is made."""

from .batch import HumanoidBatch
from .gym import GYMNASIUM_SPEC, HumanoidEnv, make_humanoid_vector

__all__ = ["GYMNASIUM_SPEC", "HumanoidBatch", "HumanoidEnv", "make_humanoid_vector"]
