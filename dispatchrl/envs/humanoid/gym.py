"""Humanoid as gymnasium ids: ``dispatchrl/Humanoid-v5``'s Env (MuJoCo's offscreen renderer draws its
frames), its vector entry point and spec."""

from typing import Any

from ..batch import BatchVectorEnv
from ..shared.mujoco import MujocoEnv
from .batch import HumanoidBatch

__all__ = ["GYMNASIUM_SPEC", "HumanoidEnv", "make_humanoid_vector"]


class HumanoidEnv(MujocoEnv):
    """``dispatchrl/Humanoid-v5``: gymnasium Humanoid-v5 (default arguments) on a :class:`HumanoidBatch` of one
    env; resets draw from ``self.np_random`` exactly like gymnasium's, observations are float64."""

    BATCH = HumanoidBatch
    TRACK_BODY = 1  # the torso, as gymnasium's camera
    CAMERA_DISTANCE = 4.0


def make_humanoid_vector(num_envs=1, max_episode_steps=1000, num_threads=None, render_mode=None) -> BatchVectorEnv:
    """``gymnasium.make_vec("dispatchrl/Humanoid-v5", num_envs, num_threads=...)`` entry point."""
    return BatchVectorEnv(HumanoidBatch(num_envs, num_threads=num_threads, max_episode_steps=max_episode_steps))


#: ``gymnasium.register`` arguments (HumanoidEnv imports mujoco only when an env is made)
GYMNASIUM_SPEC: dict[str, Any] = dict(
    id="dispatchrl/Humanoid-v5",
    entry_point=HumanoidEnv,
    vector_entry_point=make_humanoid_vector,
    max_episode_steps=1000,
)
