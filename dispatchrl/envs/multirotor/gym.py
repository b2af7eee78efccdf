"""The multirotor as gymnasium ids: ``dispatchrl/Multirotor-v0``'s Env, its vector entry point and spec."""

from typing import Any

import numpy as np

from ..batch import BatchVectorEnv, NativeBatch
from ..gym import NO_LIMIT, NativeGymEnv
from .env import Multirotor
from .render import multirotor_frame

__all__ = ["GYMNASIUM_SPEC", "MultirotorEnv", "make_multirotor_vector"]


class MultirotorEnv(NativeGymEnv):
    """The hover task, one vehicle, stepped by dispatchrl's CPU kernels and reset from
    ``self.np_random``'s seed. Its reward has the curriculum's final weights (the paper's target
    reward, which it evaluates with); keyword arguments are :class:`Multirotor` fields. Its
    frames: :func:`multirotor_frame`, one per step (real time at ``1 / dt`` fps: 100)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 100}

    def __init__(self, render_mode=None, **fields: Any) -> None:
        env = Multirotor(1, **{"max_episode_steps": NO_LIMIT, **fields})
        super().__init__(env.without_curriculum(), render_mode)
        if env.dt != 0.01:
            self.metadata = {**self.metadata, "render_fps": max(round(1 / env.dt), 1)}

    def _frame(self, physics) -> np.ndarray:
        env = self._env
        return multirotor_frame(physics, env.parameters, env.termination_position)


def make_multirotor_vector(
    num_envs=1, max_episode_steps=500, device=None, render_mode=None, **fields: Any
) -> BatchVectorEnv:
    """``gymnasium.make_vec("dispatchrl/Multirotor-v0", num_envs)`` entry point."""
    env = Multirotor(num_envs, max_episode_steps=max_episode_steps, **fields).without_curriculum()
    return BatchVectorEnv(NativeBatch(env, device), env.observation_high)


#: ``gymnasium.register`` arguments
GYMNASIUM_SPEC: dict[str, Any] = dict(
    id="dispatchrl/Multirotor-v0",
    entry_point=MultirotorEnv,
    vector_entry_point=make_multirotor_vector,
    max_episode_steps=500,
)
