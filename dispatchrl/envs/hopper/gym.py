"""Hopper as gymnasium ids: ``dispatchrl/Hopper-v5``'s Env (MuJoCo's offscreen renderer draws its
frames), its vector entry point and spec."""

from typing import Any

from ..shared.mujoco import MujocoEnv, gymnasium_spec, vector_entry_point
from .batch import HopperBatch

__all__ = ["GYMNASIUM_SPEC", "HopperEnv", "make_hopper_vector"]


class HopperEnv(MujocoEnv):
    """``dispatchrl/Hopper-v5``: gymnasium Hopper-v5 (default arguments) on a :class:`HopperBatch` of one
    env; resets draw from ``self.np_random`` exactly like gymnasium's, observations are float64."""

    BATCH = HopperBatch
    TRACK_BODY = 2  # the thigh, as gymnasium's camera
    CAMERA_DISTANCE = 3.0


make_hopper_vector = vector_entry_point(HopperBatch)

#: ``gymnasium.register`` arguments
GYMNASIUM_SPEC: dict[str, Any] = gymnasium_spec(HopperEnv, 3800.0)
