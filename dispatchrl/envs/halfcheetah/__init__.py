"""MuJoCo HalfCheetah-v5, threaded: :class:`HalfCheetahBatch` (N MjData stepped on threads) and the
``dispatchrl/HalfCheetah-v5`` gymnasium env. mujoco is imported only when one is made."""

from ..shared.mujoco import gymnasium_declarations
from .batch import HalfCheetahBatch

__all__ = ["GYMNASIUM_SPEC", "HalfCheetahBatch", "HalfCheetahEnv", "make_halfcheetah_vector"]

# the camera follows the torso
HalfCheetahEnv, make_halfcheetah_vector, GYMNASIUM_SPEC = gymnasium_declarations(
    HalfCheetahBatch, track_body=1, reward_threshold=4800.0
)
