"""The Acrobots as gymnasium ids: ``dispatchrl/AcrobotContinuous-v1``'s and ``dispatchrl/Acrobot-v1``'s
Envs, their vector entry points and specs."""

import numpy as np

from ..gym import NO_LIMIT, NativeGymEnvBase, gymnasium_spec
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


#: ``gymnasium.register`` arguments
GYMNASIUM_SPEC = gymnasium_spec("dispatchrl/AcrobotContinuous-v1", AcrobotContinuousEnv, AcrobotContinuous, 500)
make_acrobot_vector = GYMNASIUM_SPEC["vector_entry_point"]


class AcrobotEnv(AcrobotContinuousEnv):
    """gymnasium Acrobot-v1 (actions 0, 1, 2) stepped by dispatchrl's CPU kernels, reset from
    ``self.np_random`` as gymnasium's is: with the same seed and actions, the same episodes."""

    def __init__(self, render_mode=None):
        NativeGymEnvBase.__init__(self, Acrobot(1, max_episode_steps=NO_LIMIT), render_mode)


#: ``gymnasium.register`` arguments of the discrete Acrobot
DISCRETE_GYMNASIUM_SPEC = gymnasium_spec("dispatchrl/Acrobot-v1", AcrobotEnv, Acrobot, 500)
make_acrobot_discrete_vector = DISCRETE_GYMNASIUM_SPEC["vector_entry_point"]
