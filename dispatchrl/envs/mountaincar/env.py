"""The MountainCar description: gymnasium MountainCar-v0's constants, three discrete actions
(accelerate left, don't, accelerate right)."""

from dataclasses import dataclass

import numpy as np

from ..shared.env import DiscreteEnv

__all__ = [
    "FORCE",
    "GOAL_POSITION",
    "GOAL_VELOCITY",
    "GRAVITY",
    "MAX_POSITION",
    "MAX_SPEED",
    "MIN_POSITION",
    "MountainCar",
]

#: gymnasium MountainCarEnv's constants (goal_velocity at its default, 0)
MIN_POSITION = -1.2
MAX_POSITION = 0.6
MAX_SPEED = 0.07
GOAL_POSITION = 0.5
GOAL_VELOCITY = 0.0
FORCE = 0.001
GRAVITY = 0.0025


@dataclass(frozen=True)
class MountainCar(DiscreteEnv):
    """gymnasium MountainCar-v0, batched over ``num_envs``. Actions are indices: 0 accelerates
    left, 1 not at all, 2 right (an index in float32, as every native env's actions are; the
    kernels clamp it into [0, 2])."""

    num_envs: int = 1
    max_episode_steps: int = 200

    observation_dim = 2
    physics_dim = 2  # position, velocity
    num_actions = 3

    @property
    def observation_high(self) -> np.ndarray:
        """Symmetric bounds holding gymnasium's ([-1.2, 0.6] x [-0.07, 0.07])."""
        return np.array([-MIN_POSITION, MAX_SPEED], np.float32)

    name = "mountaincar"
    eval_id = "MountainCar-v0"
