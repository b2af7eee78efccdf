"""Generic (numpy) methods of Pendulum: the batched reference, vectorised over N with gymnasium's
formulas in float64 (same constants and evaluation order)."""

import numpy as np

from ...devices import Generic
from ...kernels.random.generic import uniform01
from ..shared import PI
from ..shared.generic import write_reset
from ..shared.host import kernel_methods
from .env import Pendulum

__all__: list[str] = []  # methods only: importing the module registers them


def pendulum_step_kernel(physics, steps, action, obs, reward, terminated, truncated, scale, gterm, max_steps) -> None:
    th, thdot = physics[:, 0].copy(), physics[:, 1].copy()
    u = np.clip(action[:, 0].astype(np.float64) * scale, -2.0, 2.0)
    # gymnasium's torque is a float32 scalar: its torque terms are float32 products
    u32 = u.astype(np.float32)
    cost = (((th + np.pi) % (2 * np.pi)) - np.pi) ** 2 + 0.1 * thdot**2 + 0.001 * (u32**2)
    newthdot = np.clip(thdot + (gterm * np.sin(th) + 3.0 * u32) * 0.05, -8.0, 8.0)
    newth = th + newthdot * 0.05
    physics[:, 0], physics[:, 1] = newth, newthdot
    obs[:, 0], obs[:, 1], obs[:, 2] = np.cos(newth), np.sin(newth), newthdot
    reward[:] = -cost
    steps += 1
    terminated[:] = False
    truncated[:] = steps >= max_steps


def pendulum_reset_kernel(rng, physics, steps, obs, reward, terminated, truncated, only_done) -> None:
    n = physics.shape[0]
    u = uniform01(rng, 2 * n).reshape(n, 2)  # env i draws stream positions 2i, 2i+1
    fresh = np.stack([-PI + 2 * PI * u[:, 0], -1.0 + 2.0 * u[:, 1]], axis=1)
    fresh_obs = np.stack([np.cos(fresh[:, 0]), np.sin(fresh[:, 0]), fresh[:, 1]], axis=1)
    write_reset(fresh, fresh_obs, physics, steps, obs, reward, terminated, truncated, only_done)


kernel_methods(
    Generic,
    Pendulum,
    pendulum_step_kernel,
    pendulum_reset_kernel,
    numbers=("action_scale", "gterm", "max_episode_steps"),
)
