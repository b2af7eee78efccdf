"""MuJoCo Hopper-v5, threaded: :class:`HopperBatch` (N MjData stepped on threads) and the
``dispatchrl/Hopper-v5`` gymnasium env. mujoco is imported only when one is made."""

from ..shared.mujoco import gymnasium_declarations
from .batch import HopperBatch

__all__ = ["GYMNASIUM_SPEC", "HopperBatch", "HopperEnv", "make_hopper_vector"]

# the camera follows the thigh, as gymnasium's camera
HopperEnv, make_hopper_vector, GYMNASIUM_SPEC = gymnasium_declarations(
    HopperBatch, track_body=2, camera_distance=3.0, reward_threshold=3800.0
)
