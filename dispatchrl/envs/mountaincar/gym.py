"""MountainCar as gymnasium ids: ``dispatchrl/MountainCar-v0``'s Env, its vector entry point and
spec."""

import numpy as np
from gymnasium import spaces

from ..gym import NO_LIMIT, NativeGymEnvBase, gymnasium_spec
from .env import MAX_POSITION, MAX_SPEED, MIN_POSITION, MountainCar
from .render import mountaincar_frame

__all__ = ["GYMNASIUM_SPEC", "MountainCarEnv", "make_mountaincar_vector"]


class MountainCarEnv(NativeGymEnvBase):
    """gymnasium MountainCar-v0 stepped by dispatchrl's CPU kernels, reset from ``self.np_random``
    as gymnasium's is: with the same seed and actions, the same episodes."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(self, render_mode=None):
        super().__init__(MountainCar(1, max_episode_steps=NO_LIMIT), render_mode)
        # gymnasium's own (asymmetric) bounds
        low, high = np.array([MIN_POSITION, -MAX_SPEED], np.float32), np.array([MAX_POSITION, MAX_SPEED], np.float32)
        self.observation_space = spaces.Box(low, high, dtype=np.float32)

    def reset(self, *, seed=None, options=None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        from gymnasium.envs.classic_control import utils

        low, high = utils.maybe_parse_reset_bounds(options, -0.6, -0.4)
        s = np.array([self.np_random.uniform(low=low, high=high), 0])
        self._set_physics(s)
        return s.astype(np.float32), {}

    def _frame(self, physics) -> np.ndarray:
        return mountaincar_frame(float(physics[0]))


#: ``gymnasium.register`` arguments
GYMNASIUM_SPEC = gymnasium_spec("dispatchrl/MountainCar-v0", MountainCarEnv, MountainCar, 200)
make_mountaincar_vector = GYMNASIUM_SPEC["vector_entry_point"]
