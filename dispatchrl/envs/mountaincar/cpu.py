"""CPU methods of MountainCar: one Numba loop over the N envs per call.

The per-env physics mirror gymnasium's expressions term by term (same constants, same evaluation
order, float64, no fastmath) so trajectories match gymnasium's. The per-env bodies
(``mountaincar_step_at``, ``mountaincar_reset_at``) and their helpers are in the Numba subset: :mod:`.cuda` generates its kernels from this
very source.
"""

import math

import numpy as np
from numba import njit

from ...backends.cpu import JIT_EXACT_INNER
from ...devices import CPU
from ...kernels.random.cpu import uniform01
from ..shared.cpu import clear_reset_at, index_minus_one, per_env, per_env_reset
from ..shared.host import kernel_methods
from .env import FORCE, GOAL_POSITION, GOAL_VELOCITY, GRAVITY, MAX_POSITION, MAX_SPEED, MIN_POSITION, MountainCar

#: what .cuda compiles for the GPU (the methods register themselves)
__all__ = ["mountaincar_physics", "mountaincar_push", "mountaincar_reset_at", "mountaincar_step_at"]


# --- scalar physics, compiled here with njit and by .cuda as CUDA device functions from the
# same Python source (``device_twin``), so the backends cannot drift -----------------------------


#: the push of action index ``a``: gymnasium's ``action - 1``, the index clamped into [0, 2]
mountaincar_push = index_minus_one


@njit(**JIT_EXACT_INNER)
def mountaincar_physics(position, velocity, push):
    """gymnasium MountainCarEnv.step, term by term with its constants: (position, velocity,
    terminated)."""
    velocity = velocity + (push * FORCE + math.cos(3 * position) * (-GRAVITY))
    velocity = min(max(velocity, -MAX_SPEED), MAX_SPEED)
    position = position + velocity
    position = min(max(position, MIN_POSITION), MAX_POSITION)
    if position == MIN_POSITION and velocity < 0:
        velocity = 0.0
    return position, velocity, position >= GOAL_POSITION and velocity >= GOAL_VELOCITY


# --- per-env bodies: the CPU loops below and .cuda's kernels (``per_index``) run these ----------


@njit(**JIT_EXACT_INNER)
def mountaincar_step_at(i, physics, steps, action, obs, reward, terminated, truncated, max_steps):
    position, velocity, done = mountaincar_physics(physics[i, 0], physics[i, 1], mountaincar_push(action[i, 0]))
    physics[i, 0] = position
    physics[i, 1] = velocity
    obs[i, 0] = position
    obs[i, 1] = velocity
    terminated[i] = done
    reward[i] = -1.0
    steps[i] += 1
    truncated[i] = steps[i] >= max_steps


@njit(**JIT_EXACT_INNER)
def mountaincar_reset_at(i, key, base, physics, steps, obs, reward, terminated, truncated, only_done):
    """Env i's initial state from stream position ``base`` + i."""
    if only_done and not (terminated[i] or truncated[i]):
        return
    physics[i, 0] = -0.6 + 0.2 * uniform01(key, base + np.uint64(i))  # gymnasium's U(-0.6, -0.4)
    physics[i, 1] = 0.0  # at rest
    obs[i, 0] = physics[i, 0]
    obs[i, 1] = 0.0
    clear_reset_at(i, steps, reward, terminated, truncated, only_done)


# --- CPU kernels -------------------------------------------------------------------------------


mountaincar_step_kernel = per_env(mountaincar_step_at, "mountaincar_step_kernel")


mountaincar_reset_kernel = per_env_reset(mountaincar_reset_at, "mountaincar_reset_kernel", 1)


kernel_methods(CPU, MountainCar, mountaincar_step_kernel, mountaincar_reset_kernel)
