"""Humanoid as gymnasium ids: ``dispatchrl/Humanoid-v5``'s Env (MuJoCo's offscreen renderer draws its
frames), its vector entry point and spec."""

from typing import Any

from ..shared.mujoco import MujocoEnv, gymnasium_spec, vector_entry_point
from .batch import HumanoidBatch

__all__ = ["GYMNASIUM_SPEC", "HumanoidEnv", "make_humanoid_vector"]


class HumanoidEnv(MujocoEnv):
    """``dispatchrl/Humanoid-v5``: gymnasium Humanoid-v5 (default arguments) on a :class:`HumanoidBatch` of one
    env; resets draw from ``self.np_random`` exactly like gymnasium's, observations are float64."""

    BATCH = HumanoidBatch
    TRACK_BODY = 1  # the torso, as gymnasium's camera
    CAMERA_DISTANCE = 4.0


make_humanoid_vector = vector_entry_point(HumanoidBatch)

#: ``gymnasium.register`` arguments
GYMNASIUM_SPEC: dict[str, Any] = gymnasium_spec(HumanoidEnv)
