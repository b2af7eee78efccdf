"""The Acrobots as gymnasium ids: ``dispatchrl/AcrobotContinuous-v1``'s and ``dispatchrl/Acrobot-v1``'s
Envs, their vector entry points and specs."""

from typing import Any

import numpy as np

from ..batch import BatchVectorEnv, NativeBatch
from ..gym import NO_LIMIT, NativeGymEnvBase
from .env import Acrobot, AcrobotContinuous
from .render import acrobot_frame

__all__ = [
    "DISCRETE_GYMNASIUM_SPEC",
    "GYMNASIUM_SPEC",
    "AcrobotContinuousEnv",
    "AcrobotEnv",
    "make_acrobot_discrete_vector",
    "make_acrobot_vector",
]


class AcrobotContinuousEnv(NativeGymEnvBase):
    """Acrobot-v1 with a continuous torque in [-1, 1] (RLtools paper, appendix I). With actions
    -1, 0, 1 it reproduces gymnasium Acrobot-v1 with actions 0, 1, 2."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 15}

    def __init__(self, render_mode=None):
        super().__init__(AcrobotContinuous(1, max_episode_steps=NO_LIMIT), render_mode)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        from gymnasium.envs.classic_control import utils

        low, high = utils.maybe_parse_reset_bounds(options, -0.1, 0.1)
        s = self.np_random.uniform(low=low, high=high, size=(4,)).astype(np.float32)
        self._set_physics(s)
        return np.array([np.cos(s[0]), np.sin(s[0]), np.cos(s[1]), np.sin(s[1]), s[2], s[3]], dtype=np.float32), {}

    def _frame(self, physics):
        return acrobot_frame(float(physics[0]), float(physics[1]))


def make_acrobot_vector(num_envs=1, max_episode_steps=500, device=None, render_mode=None):
    """``gymnasium.make_vec("dispatchrl/AcrobotContinuous-v1", num_envs)`` entry point."""
    env = AcrobotContinuous(num_envs, max_episode_steps=max_episode_steps)
    return BatchVectorEnv(NativeBatch(env, device), env.observation_high)


#: ``gymnasium.register`` arguments
GYMNASIUM_SPEC: dict[str, Any] = dict(
    id="dispatchrl/AcrobotContinuous-v1",
    entry_point=AcrobotContinuousEnv,
    vector_entry_point=make_acrobot_vector,
    max_episode_steps=500,
)


class AcrobotEnv(AcrobotContinuousEnv):
    """gymnasium Acrobot-v1 (actions 0, 1, 2) stepped by dispatchrl's CPU kernels, reset from
    ``self.np_random`` as gymnasium's is: with the same seed and actions, the same episodes."""

    def __init__(self, render_mode=None):
        NativeGymEnvBase.__init__(self, Acrobot(1, max_episode_steps=NO_LIMIT), render_mode)


def make_acrobot_discrete_vector(num_envs=1, max_episode_steps=500, device=None, render_mode=None) -> BatchVectorEnv:
    """``gymnasium.make_vec("dispatchrl/Acrobot-v1", num_envs)`` entry point."""
    env = Acrobot(num_envs, max_episode_steps=max_episode_steps)
    return BatchVectorEnv(NativeBatch(env, device), env.observation_high)


#: ``gymnasium.register`` arguments of the discrete Acrobot
DISCRETE_GYMNASIUM_SPEC: dict[str, Any] = dict(
    id="dispatchrl/Acrobot-v1",
    entry_point=AcrobotEnv,
    vector_entry_point=make_acrobot_discrete_vector,
    max_episode_steps=500,
)
