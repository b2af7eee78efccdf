"""Generic (numpy) methods of CartPole: the batched reference, vectorised over N with gymnasium's
formulas in float64 (same constants and evaluation order)."""

import numpy as np

from ...devices import Generic
from ...kernels.random.generic import uniform01
from ..shared.generic import write_reset
from ..shared.host import kernel_methods
from . import env  # gymnasium's constants, as env.NAME
from .env import CartPole

__all__: list[str] = []  # methods only: importing the module registers them


def cartpole_step_kernel(physics, steps, action, obs, reward, terminated, truncated, max_steps) -> None:
    x, x_dot, theta, theta_dot = physics.T
    # the index clamped into [0, 1] (NaN reads as 0): 1 pushes right
    force = np.where(action[:, 0] >= 1.0, env.FORCE_MAG, -env.FORCE_MAG)
    costheta, sintheta = np.cos(theta), np.sin(theta)
    temp = (force + env.POLEMASS_LENGTH * (theta_dot * theta_dot) * sintheta) / env.TOTAL_MASS
    thetaacc = (env.GRAVITY * sintheta - costheta * temp) / (
        env.LENGTH * (4.0 / 3.0 - env.MASSPOLE * (costheta * costheta) / env.TOTAL_MASS)
    )
    xacc = temp - env.POLEMASS_LENGTH * thetaacc * costheta / env.TOTAL_MASS
    ns = np.stack(
        [x + env.TAU * x_dot, x_dot + env.TAU * xacc, theta + env.TAU * theta_dot, theta_dot + env.TAU * thetaacc],
        axis=1,
    )
    physics[...] = ns
    obs[...] = ns
    done = (
        (ns[:, 0] < -env.X_THRESHOLD)
        | (ns[:, 0] > env.X_THRESHOLD)
        | (ns[:, 2] < -env.THETA_THRESHOLD)
        | (ns[:, 2] > env.THETA_THRESHOLD)
    )
    terminated[:] = done
    reward[:] = 1.0  # gymnasium rewards the terminal step too
    steps += 1
    truncated[:] = steps >= max_steps


def cartpole_reset_kernel(rng, physics, steps, obs, reward, terminated, truncated, only_done) -> None:
    n = physics.shape[0]
    fresh = -0.05 + 0.1 * uniform01(rng, 4 * n).reshape(n, 4)  # gymnasium keeps the draw in float64
    write_reset(fresh, fresh, physics, steps, obs, reward, terminated, truncated, only_done)


kernel_methods(Generic, CartPole, cartpole_step_kernel, cartpole_reset_kernel)
