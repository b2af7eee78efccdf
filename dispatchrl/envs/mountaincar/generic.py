"""Generic (numpy) methods of MountainCar: the batched reference, vectorised over N with
gymnasium's formulas in float64 (same constants and evaluation order)."""

import numpy as np

from ...devices import Generic
from ...kernels.random.generic import uniform01
from ..shared.generic import write_reset
from ..shared.host import kernel_methods
from .env import FORCE, GOAL_POSITION, GOAL_VELOCITY, GRAVITY, MAX_POSITION, MAX_SPEED, MIN_POSITION, MountainCar

__all__: list[str] = []  # methods only: importing the module registers them


def mountaincar_step_kernel(physics, steps, action, obs, reward, terminated, truncated, max_steps) -> None:
    position, velocity = physics[:, 0], physics[:, 1]
    a = action[:, 0]
    # the index clamped into [0, 2] (NaN reads as 0), minus 1
    push = np.where(a >= 2.0, 1.0, np.where(a >= 1.0, 0.0, -1.0))
    velocity = velocity + (push * FORCE + np.cos(3 * position) * (-GRAVITY))
    velocity = np.clip(velocity, -MAX_SPEED, MAX_SPEED)
    position = np.clip(position + velocity, MIN_POSITION, MAX_POSITION)
    velocity = np.where((position == MIN_POSITION) & (velocity < 0), 0.0, velocity)
    physics[:, 0], physics[:, 1] = position, velocity
    obs[:, 0], obs[:, 1] = position, velocity
    terminated[:] = (position >= GOAL_POSITION) & (velocity >= GOAL_VELOCITY)
    reward[:] = -1.0
    steps += 1
    truncated[:] = steps >= max_steps


def mountaincar_reset_kernel(rng, physics, steps, obs, reward, terminated, truncated, only_done) -> None:
    n = physics.shape[0]
    fresh = np.zeros((n, 2))
    fresh[:, 0] = -0.6 + 0.2 * uniform01(rng, n)  # gymnasium's U(-0.6, -0.4), at rest
    write_reset(fresh, fresh, physics, steps, obs, reward, terminated, truncated, only_done)


kernel_methods(Generic, MountainCar, mountaincar_step_kernel, mountaincar_reset_kernel)
