"""Hopper as gymnasium ids: ``dispatchrl/Hopper-v5``'s Env (MuJoCo's offscreen renderer draws its
frames), its vector entry point and spec."""

from typing import Any

from ..batch import BatchVectorEnv
from ..shared.mujoco import MujocoEnv
from .batch import HopperBatch

__all__ = ["GYMNASIUM_SPEC", "HopperEnv", "make_hopper_vector"]


class HopperEnv(MujocoEnv):
    """``dispatchrl/Hopper-v5``: gymnasium Hopper-v5 (default arguments) on a :class:`HopperBatch` of one
    env; resets draw from ``self.np_random`` exactly like gymnasium's, observations are float64."""

    BATCH = HopperBatch
    TRACK_BODY = 2  # the thigh, as gymnasium's camera
    CAMERA_DISTANCE = 3.0


def make_hopper_vector(num_envs=1, max_episode_steps=1000, num_threads=None, render_mode=None) -> BatchVectorEnv:
    """``gymnasium.make_vec("dispatchrl/Hopper-v5", num_envs, num_threads=...)`` entry point."""
    return BatchVectorEnv(HopperBatch(num_envs, num_threads=num_threads, max_episode_steps=max_episode_steps))


#: ``gymnasium.register`` arguments (HopperEnv imports mujoco only when an env is made)
GYMNASIUM_SPEC: dict[str, Any] = dict(
    id="dispatchrl/Hopper-v5",
    entry_point=HopperEnv,
    vector_entry_point=make_hopper_vector,
    max_episode_steps=1000,
    reward_threshold=3800.0,
)
