"""MuJoCo Humanoid-v5, threaded: :class:`HumanoidBatch` (N MjData stepped on threads) and the
``dispatchrl/Humanoid-v5`` gymnasium env. mujoco is imported only when one is made."""

from ..shared.mujoco import gymnasium_declarations
from .batch import HumanoidBatch

__all__ = ["GYMNASIUM_SPEC", "HumanoidBatch", "HumanoidEnv", "make_humanoid_vector"]

# the camera follows the torso, as gymnasium's camera
HumanoidEnv, make_humanoid_vector, GYMNASIUM_SPEC = gymnasium_declarations(HumanoidBatch, track_body=1)
