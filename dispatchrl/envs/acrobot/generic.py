"""Generic (numpy) methods of the Acrobots (continuous and discrete): the batched reference,
vectorised over N with gymnasium's formulas in float64 (same constants and evaluation order)."""

import numpy as np

from ...devices import Generic
from ...kernels.random.generic import uniform01
from ..shared import PI
from ..shared.generic import write_reset
from ..shared.host import kernel_methods
from .env import Acrobot, AcrobotContinuous

__all__: list[str] = []  # methods only: importing the module registers them


def acrobot_dsdt(theta1, theta2, dtheta1, dtheta2, a):
    m1 = m2 = l1 = I1 = I2 = 1.0
    lc1 = lc2 = 0.5
    g = 9.8
    d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * np.cos(theta2)) + I1 + I2
    d2 = m2 * (lc2**2 + l1 * lc2 * np.cos(theta2)) + I2
    phi2 = m2 * lc2 * g * np.cos(theta1 + theta2 - PI / 2.0)
    phi1 = (
        -m2 * l1 * lc2 * dtheta2**2 * np.sin(theta2)
        - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * np.sin(theta2)
        + (m1 * lc1 + m2 * l1) * g * np.cos(theta1 - PI / 2)
        + phi2
    )
    ddtheta2 = (a + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * np.sin(theta2) - phi2) / (
        m2 * lc2**2 + I2 - d2**2 / d1
    )
    ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
    return np.stack([dtheta1, dtheta2, ddtheta1, ddtheta2], axis=1)


def _wrap(x):
    x = x.copy()
    while (x > PI).any():
        x = np.where(x > PI, x - 2 * PI, x)
    while (x < -PI).any():
        x = np.where(x < -PI, x + 2 * PI, x)
    return x


def acrobot_step_kernel(physics, steps, action, obs, reward, terminated, truncated, max_steps):
    s = physics.copy()
    torque = np.clip(action[:, 0].astype(np.float64), -1.0, 1.0)
    k1 = acrobot_dsdt(*s.T, torque)
    k2 = acrobot_dsdt(*(s + 0.1 * k1).T, torque)
    k3 = acrobot_dsdt(*(s + 0.1 * k2).T, torque)
    k4 = acrobot_dsdt(*(s + 0.2 * k3).T, torque)
    ns = s + 0.2 / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
    ns[:, 0], ns[:, 1] = _wrap(ns[:, 0]), _wrap(ns[:, 1])
    ns[:, 2] = np.clip(ns[:, 2], -4 * PI, 4 * PI)
    ns[:, 3] = np.clip(ns[:, 3], -9 * PI, 9 * PI)
    physics[...] = ns
    obs[...] = _acrobot_obs(ns)
    done = -np.cos(ns[:, 0]) - np.cos(ns[:, 1] + ns[:, 0]) > 1.0
    terminated[:] = done
    reward[:] = np.where(done, 0.0, -1.0)
    steps += 1
    truncated[:] = steps >= max_steps


def acrobot_discrete_step_kernel(physics, steps, action, obs, reward, terminated, truncated, max_steps) -> None:
    # the index clamped into [0, 2] (NaN reads as 0), torque = index - 1: exact in float32, and
    # within the continuous kernel's clip, so the step is the continuous one at that torque
    torque = np.where(action >= 2.0, 1.0, np.where(action >= 1.0, 0.0, -1.0)).astype(np.float32)
    acrobot_step_kernel(physics, steps, torque, obs, reward, terminated, truncated, max_steps)


def _acrobot_obs(s) -> np.ndarray:
    return np.stack([np.cos(s[:, 0]), np.sin(s[:, 0]), np.cos(s[:, 1]), np.sin(s[:, 1]), s[:, 2], s[:, 3]], axis=1)


def acrobot_reset_kernel(rng, physics, steps, obs, reward, terminated, truncated, only_done) -> None:
    n = physics.shape[0]
    u = uniform01(rng, 4 * n).reshape(n, 4)
    # gymnasium draws the reset state in float64 and stores it as float32
    fresh = (-0.1 + 0.2 * u).astype(np.float32).astype(np.float64)
    write_reset(fresh, _acrobot_obs(fresh), physics, steps, obs, reward, terminated, truncated, only_done)


kernel_methods(Generic, AcrobotContinuous, acrobot_step_kernel, acrobot_reset_kernel)
kernel_methods(Generic, Acrobot, acrobot_discrete_step_kernel, acrobot_reset_kernel)
