"""CartPole as gymnasium ids: ``dispatchrl/CartPole-v1``'s Env, its vector entry point and spec."""

from typing import Any

import numpy as np

from ..batch import BatchVectorEnv, NativeBatch
from ..gym import NO_LIMIT, NativeGymEnvBase
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


def make_cartpole_vector(num_envs=1, max_episode_steps=500, device=None, render_mode=None) -> BatchVectorEnv:
    """``gymnasium.make_vec("dispatchrl/CartPole-v1", num_envs)`` entry point."""
    env = CartPole(num_envs, max_episode_steps=max_episode_steps)
    return BatchVectorEnv(NativeBatch(env, device), env.observation_high)


#: ``gymnasium.register`` arguments
GYMNASIUM_SPEC: dict[str, Any] = dict(
    id="dispatchrl/CartPole-v1",
    entry_point=CartPoleEnv,
    vector_entry_point=make_cartpole_vector,
    max_episode_steps=500,
)
