"""HalfCheetah as gymnasium ids: ``dispatchrl/HalfCheetah-v5``'s Env (MuJoCo's offscreen renderer draws its
frames), its vector entry point and spec."""

from typing import Any

from ..shared.mujoco import MujocoEnv, gymnasium_spec, vector_entry_point
from .batch import HalfCheetahBatch

__all__ = ["GYMNASIUM_SPEC", "HalfCheetahEnv", "make_halfcheetah_vector"]


class HalfCheetahEnv(MujocoEnv):
    """``dispatchrl/HalfCheetah-v5``: gymnasium HalfCheetah-v5 (default arguments) on a :class:`HalfCheetahBatch` of one
    env; resets draw from ``self.np_random`` exactly like gymnasium's, observations are float64."""

    BATCH = HalfCheetahBatch
    TRACK_BODY = 1  # the torso
    CAMERA_DISTANCE = 4.0


make_halfcheetah_vector = vector_entry_point(HalfCheetahBatch)

#: ``gymnasium.register`` arguments
GYMNASIUM_SPEC: dict[str, Any] = gymnasium_spec(HalfCheetahEnv, 4800.0)
