"""Walker2d as gymnasium ids: ``dispatchrl/Walker2d-v5``'s Env (MuJoCo's offscreen renderer draws its
frames), its vector entry point and spec."""

from typing import Any

from ..shared.mujoco import MujocoEnv, gymnasium_spec, vector_entry_point
from .batch import Walker2dBatch

__all__ = ["GYMNASIUM_SPEC", "Walker2dEnv", "make_walker2d_vector"]


class Walker2dEnv(MujocoEnv):
    """``dispatchrl/Walker2d-v5``: gymnasium Walker2d-v5 (default arguments) on a :class:`Walker2dBatch` of one
    env; resets draw from ``self.np_random`` exactly like gymnasium's, observations are float64."""

    BATCH = Walker2dBatch
    TRACK_BODY = 2  # the thigh, as gymnasium's camera
    CAMERA_DISTANCE = 4.0


make_walker2d_vector = vector_entry_point(Walker2dBatch)

#: ``gymnasium.register`` arguments
GYMNASIUM_SPEC: dict[str, Any] = gymnasium_spec(Walker2dEnv)
