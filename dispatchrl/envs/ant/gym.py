"""Ant as gymnasium ids: ``dispatchrl/Ant-v5``'s Env (MuJoCo's offscreen renderer draws its
frames), its vector entry point and spec."""

from typing import Any

import numpy as np

from ..shared.mujoco import MujocoEnv, gymnasium_spec, vector_entry_point
from .batch import MAIN_BODY, AntBatch

__all__ = ["GYMNASIUM_SPEC", "AntEnv", "make_ant_vector"]


class AntEnv(MujocoEnv):
    """``dispatchrl/Ant-v5``: gymnasium Ant-v5 (default arguments) on an :class:`AntBatch` of one
    env; resets draw from ``self.np_random`` exactly like gymnasium's, observations are float64.
    Its info adds the torso's planar position and distance from the origin, as Ant-v5's."""

    BATCH = AntBatch
    TRACK_BODY = MAIN_BODY

    def _position_info(self) -> dict[str, Any]:
        q = self._batch.qpos[0]
        return {"x_position": q[0], "y_position": q[1], "distance_from_origin": np.linalg.norm(q[0:2], ord=2)}

    def reset(self, *, seed=None, options=None) -> tuple[np.ndarray, dict[str, Any]]:
        obs, _ = super().reset(seed=seed, options=options)
        return obs, self._position_info()

    def step(self, action) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        del info["x_position"], info["y_position"]
        return obs, reward, terminated, truncated, dict(self._position_info(), **info)


make_ant_vector = vector_entry_point(AntBatch)

#: ``gymnasium.register`` arguments (AntEnv imports mujoco only when an env is made)
GYMNASIUM_SPEC: dict[str, Any] = gymnasium_spec(AntEnv, 6000.0)
