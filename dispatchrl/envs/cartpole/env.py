"""The CartPole description: gymnasium CartPole-v1's constants, two discrete actions (push the
cart left, right)."""

import math
from dataclasses import dataclass

import numpy as np

from ..shared.env import DiscreteEnv

__all__ = [
    "FORCE_MAG",
    "GRAVITY",
    "LENGTH",
    "MASSPOLE",
    "POLEMASS_LENGTH",
    "TAU",
    "THETA_THRESHOLD",
    "TOTAL_MASS",
    "X_THRESHOLD",
    "CartPole",
]

#: gymnasium CartPoleEnv's constants, computed as it computes them
GRAVITY = 9.8
MASSCART = 1.0
MASSPOLE = 0.1
TOTAL_MASS = MASSPOLE + MASSCART
LENGTH = 0.5  # half the pole's length
POLEMASS_LENGTH = MASSPOLE * LENGTH
FORCE_MAG = 10.0
TAU = 0.02
THETA_THRESHOLD = 12 * 2 * math.pi / 360
X_THRESHOLD = 2.4


@dataclass(frozen=True)
class CartPole(DiscreteEnv):
    """gymnasium CartPole-v1 (Euler integration, 0.02 s steps), batched over ``num_envs``.
    Actions are indices: 0 pushes the cart left, 1 right (an index in float32, as every native
    env's actions are; the kernels clamp it into [0, 1])."""

    num_envs: int = 1
    max_episode_steps: int = 500

    observation_dim = 4
    physics_dim = 4  # x, x_dot, theta, theta_dot
    num_actions = 2

    @property
    def observation_high(self) -> np.ndarray:
        """gymnasium's bounds: twice the termination thresholds, unbounded velocities."""
        return np.array([X_THRESHOLD * 2, np.inf, THETA_THRESHOLD * 2, np.inf], np.float32)

    name = "cartpole"
    eval_id = "CartPole-v1"
