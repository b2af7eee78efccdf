"""Pendulum as gymnasium ids: ``dispatchrl/Pendulum-v1``'s Env, its vector entry point and spec."""

import math

import numpy as np

from ..gym import NO_LIMIT, NativeGymEnvBase, gymnasium_spec
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


#: ``gymnasium.register`` arguments
GYMNASIUM_SPEC = gymnasium_spec("dispatchrl/Pendulum-v1", PendulumEnv, Pendulum, 200)
make_pendulum_vector = GYMNASIUM_SPEC["vector_entry_point"]
