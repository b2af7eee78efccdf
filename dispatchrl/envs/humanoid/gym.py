"""Humanoid as gymnasium ids: ``dispatchrl/Humanoid-v5``'s Env (MuJoCo's offscreen renderer draws its
frames), its vector entry point and spec."""

from typing import Any

from ..shared.mujoco import MujocoEnv, gymnasium_spec, vector_entry_point
from .batch import HumanoidBatch

__all__ = ["GYMNASIUM_SPEC", "HumanoidEnv", "make_humanoid_vector"]


class HumanoidEnv(MujocoEnv):
    BATCH = HumanoidBatch
    TRACK_BODY = 1  # the torso, as gymnasium's camera
    CAMERA_DISTANCE = 4.0


make_humanoid_vector = vector_entry_point(HumanoidBatch)

#: ``gymnasium.register`` arguments
GYMNASIUM_SPEC: dict[str, Any] = gymnasium_spec(HumanoidEnv)
