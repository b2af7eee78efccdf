"""HalfCheetah as gymnasium ids: ``dispatchrl/HalfCheetah-v5``'s Env (MuJoCo's offscreen renderer draws its
frames), its vector entry point and spec."""

from typing import Any

from ..batch import BatchVectorEnv
from ..shared.mujoco import MujocoEnv
from .batch import HalfCheetahBatch

__all__ = ["GYMNASIUM_SPEC", "HalfCheetahEnv", "make_halfcheetah_vector"]


class HalfCheetahEnv(MujocoEnv):
    """``dispatchrl/HalfCheetah-v5``: gymnasium HalfCheetah-v5 (default arguments) on a :class:`HalfCheetahBatch` of one
    env; resets draw from ``self.np_random`` exactly like gymnasium's, observations are float64."""

    BATCH = HalfCheetahBatch
    TRACK_BODY = 1  # the torso
    CAMERA_DISTANCE = 4.0


def make_halfcheetah_vector(num_envs=1, max_episode_steps=1000, num_threads=None, render_mode=None) -> BatchVectorEnv:
    """``gymnasium.make_vec("dispatchrl/HalfCheetah-v5", num_envs, num_threads=...)`` entry point."""
    return BatchVectorEnv(HalfCheetahBatch(num_envs, num_threads=num_threads, max_episode_steps=max_episode_steps))


#: ``gymnasium.register`` arguments (HalfCheetahEnv imports mujoco only when an env is made)
GYMNASIUM_SPEC: dict[str, Any] = dict(
    id="dispatchrl/HalfCheetah-v5",
    entry_point=HalfCheetahEnv,
    vector_entry_point=make_halfcheetah_vector,
    max_episode_steps=1000,
    reward_threshold=4800.0,
)
