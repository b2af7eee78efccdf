"""CartPole as gymnasium ids: ``dispatchrl/CartPole-v1``'s Env, its vector entry point and spec."""

import numpy as np

from ..gym import NO_LIMIT, NativeGymEnvBase, gymnasium_spec
from .env import CartPole
from .render import cartpole_frame

__all__ = ["GYMNASIUM_SPEC", "CartPoleEnv", "make_cartpole_vector"]


class CartPoleEnv(NativeGymEnvBase):
    """gymnasium CartPole-v1 stepped by dispatchrl's CPU kernels, reset from ``self.np_random`` as
    gymnasium's is: with the same seed and actions, the same episodes."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 50}

    def __init__(self, render_mode=None):
        super().__init__(CartPole(1, max_episode_steps=NO_LIMIT), render_mode)

    def reset(self, *, seed=None, options=None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        from gymnasium.envs.classic_control import utils

        low, high = utils.maybe_parse_reset_bounds(options, -0.05, 0.05)
        s = self.np_random.uniform(low=low, high=high, size=(4,))
        self._set_physics(s)
        return s.astype(np.float32), {}

    def _frame(self, physics) -> np.ndarray:
        return cartpole_frame(float(physics[0]), float(physics[2]))


#: ``gymnasium.register`` arguments
GYMNASIUM_SPEC = gymnasium_spec("dispatchrl/CartPole-v1", CartPoleEnv, CartPole, 500)
make_cartpole_vector = GYMNASIUM_SPEC["vector_entry_point"]
