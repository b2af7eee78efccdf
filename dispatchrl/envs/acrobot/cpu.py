"""CPU methods of the Acrobots (continuous and discrete): one Numba loop over the N envs per call.

The per-env physics mirror gymnasium's expressions term by term (same constants, same evaluation
order, float64, no fastmath) so trajectories match gymnasium's. The per-env bodies
(``acrobot_step_at``, ``acrobot_discrete_step_at``, ``acrobot_reset_at``) and their helpers are in the Numba subset: :mod:`.cuda` generates its kernels from this
very source.
"""

import math

import numpy as np
from numba import njit

from ...backends.cpu import JIT_EXACT_INNER
from ...devices import CPU
from ...kernels.random.cpu import uniform01
from ..shared import PI, TWO_PI
from ..shared.cpu import clear_reset_at, index_minus_one, per_env, per_env_reset
from ..shared.host import kernel_methods
from .env import MAX_VEL_1, MAX_VEL_2, Acrobot, AcrobotContinuous

#: what .cuda compiles for the GPU (the methods register themselves)
__all__ = [
    "acrobot_discrete_step_at",
    "acrobot_dsdt",
    "acrobot_index_torque",
    "acrobot_observe_at",
    "acrobot_reset_at",
    "acrobot_rk4",
    "acrobot_step_at",
    "acrobot_terminal",
    "acrobot_torque_step_at",
    "wrap_angle",
]


# --- scalar physics, compiled here with njit and by .cuda as CUDA device functions from the
# same Python source (``device_twin``), so the backends cannot drift -----------------------------


@njit(**JIT_EXACT_INNER)
def acrobot_dsdt(theta1, theta2, dtheta1, dtheta2, a):
    """gymnasium AcrobotEnv._dsdt, "book" dynamics, term by term with its constants."""
    m1 = 1.0
    m2 = 1.0
    l1 = 1.0
    lc1 = 0.5
    lc2 = 0.5
    I1 = 1.0
    I2 = 1.0
    g = 9.8
    d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * math.cos(theta2)) + I1 + I2
    d2 = m2 * (lc2**2 + l1 * lc2 * math.cos(theta2)) + I2
    phi2 = m2 * lc2 * g * math.cos(theta1 + theta2 - PI / 2.0)
    phi1 = (
        -m2 * l1 * lc2 * dtheta2**2 * math.sin(theta2)
        - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * math.sin(theta2)
        + (m1 * lc1 + m2 * l1) * g * math.cos(theta1 - PI / 2)
        + phi2
    )
    ddtheta2 = (a + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * math.sin(theta2) - phi2) / (
        m2 * lc2**2 + I2 - d2**2 / d1
    )
    ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
    return dtheta1, dtheta2, ddtheta1, ddtheta2


@njit(**JIT_EXACT_INNER)
def wrap_angle(x):
    """gymnasium's wrap(x, -pi, pi)."""
    while x > PI:
        x = x - TWO_PI
    while x < -PI:
        x = x + TWO_PI
    return x


@njit(**JIT_EXACT_INNER)
def acrobot_terminal(theta1, theta2):
    return -math.cos(theta1) - math.cos(theta2 + theta1) > 1.0


@njit(**JIT_EXACT_INNER)
def acrobot_rk4(s0, s1, s2, s3, torque):
    """gymnasium's rk4 over [0, dt]: one step with dt = 0.2, then wrap and clip."""
    dt2 = 0.1
    k10, k11, k12, k13 = acrobot_dsdt(s0, s1, s2, s3, torque)
    k20, k21, k22, k23 = acrobot_dsdt(s0 + dt2 * k10, s1 + dt2 * k11, s2 + dt2 * k12, s3 + dt2 * k13, torque)
    k30, k31, k32, k33 = acrobot_dsdt(s0 + dt2 * k20, s1 + dt2 * k21, s2 + dt2 * k22, s3 + dt2 * k23, torque)
    k40, k41, k42, k43 = acrobot_dsdt(s0 + 0.2 * k30, s1 + 0.2 * k31, s2 + 0.2 * k32, s3 + 0.2 * k33, torque)
    h = 0.2 / 6.0
    n0 = s0 + h * (k10 + 2 * k20 + 2 * k30 + k40)
    n1 = s1 + h * (k11 + 2 * k21 + 2 * k31 + k41)
    n2 = s2 + h * (k12 + 2 * k22 + 2 * k32 + k42)
    n3 = s3 + h * (k13 + 2 * k23 + 2 * k33 + k43)
    n0 = wrap_angle(n0)
    n1 = wrap_angle(n1)
    n2 = min(max(n2, -MAX_VEL_1), MAX_VEL_1)
    n3 = min(max(n3, -MAX_VEL_2), MAX_VEL_2)
    return n0, n1, n2, n3


#: gymnasium Acrobot-v1's torque of action index ``a``: index - 1, the index clamped into [0, 2]
acrobot_index_torque = index_minus_one


@njit(**JIT_EXACT_INNER)
def acrobot_observe_at(i, physics, obs):
    obs[i, 0] = math.cos(physics[i, 0])
    obs[i, 1] = math.sin(physics[i, 0])
    obs[i, 2] = math.cos(physics[i, 1])
    obs[i, 3] = math.sin(physics[i, 1])
    obs[i, 4] = physics[i, 2]
    obs[i, 5] = physics[i, 3]


# --- per-env bodies: the CPU loops below and .cuda's kernels (``per_index``) run these ----------


# inlined into both step bodies at Numba IR level: called, it made the CPU step ~1.7x slower (NOTES.md)
@njit(inline="always", **JIT_EXACT_INNER)
def acrobot_torque_step_at(i, torque, physics, steps, obs, reward, terminated, truncated, max_steps):
    """Env i's step under ``torque``, whichever action space gave it."""
    s0, s1, s2, s3 = acrobot_rk4(physics[i, 0], physics[i, 1], physics[i, 2], physics[i, 3], torque)
    physics[i, 0] = s0
    physics[i, 1] = s1
    physics[i, 2] = s2
    physics[i, 3] = s3
    acrobot_observe_at(i, physics, obs)
    done = acrobot_terminal(s0, s1)
    reward[i] = 0.0 if done else -1.0
    terminated[i] = done
    steps[i] += 1
    truncated[i] = steps[i] >= max_steps


@njit(**JIT_EXACT_INNER)
def acrobot_step_at(i, physics, steps, action, obs, reward, terminated, truncated, max_steps):
    torque = min(max(np.float64(action[i, 0]), -1.0), 1.0)
    acrobot_torque_step_at(i, torque, physics, steps, obs, reward, terminated, truncated, max_steps)


@njit(**JIT_EXACT_INNER)
def acrobot_discrete_step_at(i, physics, steps, action, obs, reward, terminated, truncated, max_steps):
    torque = acrobot_index_torque(action[i, 0])
    acrobot_torque_step_at(i, torque, physics, steps, obs, reward, terminated, truncated, max_steps)


@njit(**JIT_EXACT_INNER)
def acrobot_reset_at(i, key, base, physics, steps, obs, reward, terminated, truncated, only_done):
    """Env i's initial state from stream positions ``base`` + 4i ... 4i + 3."""
    if only_done and not (terminated[i] or truncated[i]):
        return
    for j in range(4):
        # gymnasium draws the reset state in float64 and stores it as float32
        physics[i, j] = np.float32(-0.1 + 0.2 * uniform01(key, base + np.uint64(4 * i + j)))
    acrobot_observe_at(i, physics, obs)
    clear_reset_at(i, steps, reward, terminated, truncated, only_done)


# --- CPU kernels -------------------------------------------------------------------------------


acrobot_step_kernel = per_env(acrobot_step_at, "acrobot_step_kernel")


acrobot_discrete_step_kernel = per_env(acrobot_discrete_step_at, "acrobot_discrete_step_kernel")


acrobot_reset_kernel = per_env_reset(acrobot_reset_at, "acrobot_reset_kernel", 4)


kernel_methods(CPU, AcrobotContinuous, acrobot_step_kernel, acrobot_reset_kernel)
kernel_methods(CPU, Acrobot, acrobot_discrete_step_kernel, acrobot_reset_kernel)
