"""The continuous Acrobot description: gymnasium Acrobot-v1's constants, a torque in [-1, 1]."""

import math
from dataclasses import dataclass

import numpy as np

from ..api import NativeEnv, check_count

__all__ = ["MAX_VEL_1", "MAX_VEL_2", "AcrobotContinuous"]

#: gymnasium's joint velocity limits
MAX_VEL_1 = 4 * math.pi
MAX_VEL_2 = 9 * math.pi


@dataclass(frozen=True)
class AcrobotContinuous(NativeEnv):
    """gymnasium Acrobot-v1 ("book" dynamics, one RK4 step of 0.2 s) with a continuous torque
    ``clip(action, -1, 1)`` (RLtools paper, appendix I)."""

    num_envs: int = 1
    max_episode_steps: int = 500

    observation_dim = 6
    action_dim = 1
    physics_dim = 4  # theta1, theta2, dtheta1, dtheta2
    max_vel_1 = MAX_VEL_1
    max_vel_2 = MAX_VEL_2

    def __post_init__(self) -> None:
        check_count("AcrobotContinuous", "num_envs", self.num_envs)
        check_count("AcrobotContinuous", "max_episode_steps", self.max_episode_steps)

    action_low = property(lambda self: np.full(1, -1.0, np.float32))
    action_high = property(lambda self: np.full(1, 1.0, np.float32))

    @property
    def observation_high(self):
        return np.array([1, 1, 1, 1, self.max_vel_1, self.max_vel_2], np.float32)

    name = "acrobot"
    eval_id = "dispatchrl/AcrobotContinuous-v1"
