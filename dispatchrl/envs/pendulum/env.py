"""The Pendulum description: gymnasium Pendulum-v1's constants and its action bounds."""

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from ...errors import ConfigError
from ..shared.env import BuiltinEnv

__all__ = ["U_COST", "Pendulum"]

U_COST = float(np.float32(0.001))  # gymnasium's 0.001, as float32 arithmetic sees it


@dataclass(frozen=True)
class Pendulum(BuiltinEnv):
    """gymnasium Pendulum-v1, batched over ``num_envs``. Actions are torques in [-2, 2]
    (gymnasium's scale) or, with ``normalized_actions``, in [-1, 1] scaled by 2 (RLtools)."""

    num_envs: int = 1
    normalized_actions: bool = False
    max_episode_steps: int = 200
    g: float = 10.0

    observation_dim = 3
    action_dim = 1
    physics_dim = 2  # theta, theta_dot
    #: gymnasium's constants, kept here so every backend reads the same values
    max_speed = 8.0
    max_torque = 2.0
    dt = 0.05

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.normalized_actions, (bool, np.bool_)):
            raise ConfigError(f"Pendulum: 'normalized_actions' must be a bool, got {self.normalized_actions!r}")
        if not (isinstance(self.g, (int, float)) and math.isfinite(self.g)):
            raise ConfigError(f"Pendulum: 'g' must be a finite number, got {self.g!r}")

    @property
    def action_scale(self):
        """Torque per unit of action."""
        return self.max_torque if self.normalized_actions else 1.0

    @property
    def gterm(self) -> float:
        """gymnasium's 3 g / (2 l), the rod length l being 1."""
        return 3 * self.g / (2 * 1.0)

    @property
    def action_low(self):
        return np.full(1, -1.0 if self.normalized_actions else -self.max_torque, np.float32)

    @property
    def action_high(self):
        return np.full(1, 1.0 if self.normalized_actions else self.max_torque, np.float32)

    @property
    def observation_high(self):
        return np.array([1.0, 1.0, self.max_speed], np.float32)

    name = "pendulum"
    eval_id = "Pendulum-v1"

    def training_env(self) -> "Pendulum":
        # RLtools' normalised torque: the policy's [-1, 1] is scaled by the max torque
        return self if self.normalized_actions else dataclasses.replace(self, normalized_actions=True)

    def policy_action_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        torque = np.full(1, self.max_torque, np.float32)
        return -torque, torque
