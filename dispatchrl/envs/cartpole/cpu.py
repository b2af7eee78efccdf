"""CPU methods of CartPole: one Numba loop over the N envs per call.

The per-env physics mirror gymnasium's expressions term by term (same constants, same evaluation
order, float64, no fastmath) so trajectories match gymnasium's. The per-env bodies
(``cartpole_step_at``, ``cartpole_reset_at``) and their helpers are in the Numba subset: :mod:`.cuda` generates its kernels from this
very source.
"""

import math

import numpy as np
from numba import njit

from ...backends.cpu import JIT_EXACT_INNER
from ...devices import CPU
from ...kernels.random.cpu import uniform01
from ..shared.cpu import clear_reset_at, per_env, per_env_reset
from ..shared.host import kernel_methods
from .env import (
    FORCE_MAG,
    GRAVITY,
    LENGTH,
    MASSPOLE,
    POLEMASS_LENGTH,
    TAU,
    THETA_THRESHOLD,
    TOTAL_MASS,
    X_THRESHOLD,
    CartPole,
)

#: what .cuda compiles for the GPU (the methods register themselves)
__all__ = ["cartpole_force", "cartpole_physics", "cartpole_reset_at", "cartpole_step_at", "cartpole_terminal"]


# --- scalar physics, compiled here with njit and by .cuda as CUDA device functions from the
# same Python source (``device_twin``), so the backends cannot drift -----------------------------


@njit(**JIT_EXACT_INNER)
def cartpole_force(a):
    """The force of action index ``a`` (a float) clamped into [0, 1]: 1 pushes right, anything
    below 1 (0, a negative index, NaN) left, so no index reads out of range."""
    return FORCE_MAG if a >= 1.0 else -FORCE_MAG


@njit(**JIT_EXACT_INNER)
def cartpole_physics(x, x_dot, theta, theta_dot, force):
    """gymnasium CartPoleEnv.step's Euler update, term by term with its constants."""
    costheta = math.cos(theta)
    sintheta = math.sin(theta)
    temp = (force + POLEMASS_LENGTH * (theta_dot * theta_dot) * sintheta) / TOTAL_MASS
    thetaacc = (GRAVITY * sintheta - costheta * temp) / (
        LENGTH * (4.0 / 3.0 - MASSPOLE * (costheta * costheta) / TOTAL_MASS)
    )
    xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS
    return x + TAU * x_dot, x_dot + TAU * xacc, theta + TAU * theta_dot, theta_dot + TAU * thetaacc


@njit(**JIT_EXACT_INNER)
def cartpole_terminal(x, theta):
    return x < -X_THRESHOLD or x > X_THRESHOLD or theta < -THETA_THRESHOLD or theta > THETA_THRESHOLD


# --- per-env bodies: the CPU loops below and .cuda's kernels (``per_index``) run these ----------


@njit(**JIT_EXACT_INNER)
def cartpole_step_at(i, physics, steps, action, obs, reward, terminated, truncated, max_steps):
    force = cartpole_force(action[i, 0])
    s0, s1, s2, s3 = cartpole_physics(physics[i, 0], physics[i, 1], physics[i, 2], physics[i, 3], force)
    physics[i, 0] = s0
    physics[i, 1] = s1
    physics[i, 2] = s2
    physics[i, 3] = s3
    obs[i, 0] = s0
    obs[i, 1] = s1
    obs[i, 2] = s2
    obs[i, 3] = s3
    terminated[i] = cartpole_terminal(s0, s2)
    reward[i] = 1.0  # gymnasium rewards the terminal step too
    steps[i] += 1
    truncated[i] = steps[i] >= max_steps


@njit(**JIT_EXACT_INNER)
def cartpole_reset_at(i, key, base, physics, steps, obs, reward, terminated, truncated, only_done):
    """Env i's initial state from stream positions ``base`` + 4i ... 4i + 3."""
    if only_done and not (terminated[i] or truncated[i]):
        return
    for j in range(4):
        # gymnasium's U(-0.05, 0.05), kept in float64 as gymnasium keeps it
        physics[i, j] = -0.05 + 0.1 * uniform01(key, base + np.uint64(4 * i + j))
        obs[i, j] = physics[i, j]
    clear_reset_at(i, steps, reward, terminated, truncated, only_done)


# --- CPU kernels -------------------------------------------------------------------------------


cartpole_step_kernel = per_env(cartpole_step_at, "cartpole_step_kernel")


cartpole_reset_kernel = per_env_reset(cartpole_reset_at, "cartpole_reset_kernel", 4)


kernel_methods(CPU, CartPole, cartpole_step_kernel, cartpole_reset_kernel)
