"""Pendulum as gymnasium ids: ``dispatchrl/Pendulum-v1``'s Env, its vector entry point and spec."""

import math
from typing import Any

import numpy as np

from ..batch import BatchVectorEnv, NativeBatch
from ..gym import NO_LIMIT, NativeGymEnvBase
from .env import Pendulum
from .render import pendulum_frame

__all__ = ["GYMNASIUM_SPEC", "PendulumEnv", "make_pendulum_vector"]


class PendulumEnv(NativeGymEnvBase):
    """gymnasium Pendulum-v1 on dispatchrl's kernels; ``normalized_actions=True`` takes actions in
    [-1, 1] (scaled by the max torque 2, as in the RLtools paper) instead of torques in [-2, 2]."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(self, render_mode=None, g=10.0, normalized_actions=False):
        super().__init__(
            Pendulum(1, normalized_actions=normalized_actions, max_episode_steps=NO_LIMIT, g=float(g)), render_mode
        )

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        x, y = math.pi, 1.0  # gymnasium's DEFAULT_X, DEFAULT_Y and its reset options
        if options is not None:
            from gymnasium.envs.classic_control import utils

            x = utils.verify_number_and_cast(options.get("x_init", x))
            y = utils.verify_number_and_cast(options.get("y_init", y))
        high = np.array([x, y])
        th, thdot = self.np_random.uniform(low=-high, high=high)
        self._set_physics([th, thdot])
        return np.array([np.cos(th), np.sin(th), thdot], dtype=np.float32), {}

    def _frame(self, physics):
        return pendulum_frame(float(physics[0]))


def make_pendulum_vector(
    num_envs=1, max_episode_steps=200, normalized_actions=False, g=10.0, device=None, render_mode=None
):
    """``gymnasium.make_vec("dispatchrl/Pendulum-v1", num_envs)`` entry point."""
    env = Pendulum(num_envs, normalized_actions=normalized_actions, max_episode_steps=max_episode_steps, g=g)
    return BatchVectorEnv(NativeBatch(env, device), env.observation_high)


#: ``gymnasium.register`` arguments
GYMNASIUM_SPEC: dict[str, Any] = dict(
    id="dispatchrl/Pendulum-v1",
    entry_point=PendulumEnv,
    vector_entry_point=make_pendulum_vector,
    max_episode_steps=200,
)
