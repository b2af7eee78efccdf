"""Walker2d as gymnasium ids: ``dispatchrl/Walker2d-v5``'s Env (MuJoCo's offscreen renderer draws its
frames), its vector entry point and spec."""

from typing import Any

from ..batch import BatchVectorEnv
from ..shared.mujoco import MujocoEnv
from .batch import Walker2dBatch

__all__ = ["GYMNASIUM_SPEC", "Walker2dEnv", "make_walker2d_vector"]


class Walker2dEnv(MujocoEnv):
    """``dispatchrl/Walker2d-v5``: gymnasium Walker2d-v5 (default arguments) on a :class:`Walker2dBatch` of one
    env; resets draw from ``self.np_random`` exactly like gymnasium's, observations are float64."""

    BATCH = Walker2dBatch
    TRACK_BODY = 2  # the thigh, as gymnasium's camera
    CAMERA_DISTANCE = 4.0


def make_walker2d_vector(num_envs=1, max_episode_steps=1000, num_threads=None, render_mode=None) -> BatchVectorEnv:
    """``gymnasium.make_vec("dispatchrl/Walker2d-v5", num_envs, num_threads=...)`` entry point."""
    return BatchVectorEnv(Walker2dBatch(num_envs, num_threads=num_threads, max_episode_steps=max_episode_steps))


#: ``gymnasium.register`` arguments (Walker2dEnv imports mujoco only when an env is made)
GYMNASIUM_SPEC: dict[str, Any] = dict(
    id="dispatchrl/Walker2d-v5",
    entry_point=Walker2dEnv,
    vector_entry_point=make_walker2d_vector,
    max_episode_steps=1000,
)
