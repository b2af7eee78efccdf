"""The Acrobot descriptions: gymnasium Acrobot-v1's constants, with a torque in [-1, 1]
(:class:`AcrobotContinuous`) or gymnasium's three actions (:class:`Acrobot`)."""

import math
from dataclasses import dataclass

import numpy as np

from ..shared.env import BuiltinEnv, DiscreteEnv

__all__ = ["MAX_VEL_1", "MAX_VEL_2", "Acrobot", "AcrobotContinuous"]

#: gymnasium's joint velocity limits
MAX_VEL_1 = 4 * math.pi
MAX_VEL_2 = 9 * math.pi


@dataclass(frozen=True)
class AcrobotContinuous(BuiltinEnv):
    """gymnasium Acrobot-v1 ("book" dynamics, one RK4 step of 0.2 s) with a continuous torque
    ``clip(action, -1, 1)`` (RLtools paper, appendix I)."""

    num_envs: int = 1
    max_episode_steps: int = 500

    observation_dim = 6
    action_dim = 1
    physics_dim = 4  # theta1, theta2, dtheta1, dtheta2
    max_vel_1 = MAX_VEL_1
    max_vel_2 = MAX_VEL_2

    action_low = property(lambda self: np.full(1, -1.0, np.float32))
    action_high = property(lambda self: np.full(1, 1.0, np.float32))

    @property
    def observation_high(self):
        return np.array([1, 1, 1, 1, self.max_vel_1, self.max_vel_2], np.float32)

    name = "acrobot"
    eval_id = "dispatchrl/AcrobotContinuous-v1"


@dataclass(frozen=True)
class Acrobot(DiscreteEnv):
    """gymnasium Acrobot-v1 itself: :class:`AcrobotContinuous`'s dynamics with gymnasium's three
    actions, indices 0, 1, 2 applying torques -1, 0, 1 (an index in float32, as every native env's
    actions are; the kernels clamp it into [0, 2])."""

    num_envs: int = 1
    max_episode_steps: int = 500

    observation_dim = 6
    physics_dim = 4  # theta1, theta2, dtheta1, dtheta2
    num_actions = 3
    max_vel_1 = MAX_VEL_1
    max_vel_2 = MAX_VEL_2

    @property
    def observation_high(self) -> np.ndarray:
        return np.array([1, 1, 1, 1, self.max_vel_1, self.max_vel_2], np.float32)

    name = "acrobot-v1"
    eval_id = "Acrobot-v1"
