"""CPU methods of Pendulum: one Numba loop over the N envs per call.

The per-env physics mirror gymnasium's expressions term by term (same constants, same evaluation
order, float64, no fastmath) so trajectories match gymnasium's. The per-env bodies
(``pendulum_step_at``, ``pendulum_reset_at``) and their helpers are in the Numba subset: :mod:`.cuda`
generates its kernels from this very source.
"""

import math

import numpy as np
from numba import njit

from ...backends.cpu import JIT_EXACT_INNER
from ...devices import CPU
from ...kernels.random.cpu import uniform01
from ..shared import PI, TWO_PI
from ..shared.cpu import clear_reset_at, per_env, per_env_reset
from ..shared.host import kernel_methods
from .env import U_COST, Pendulum

#: what .cuda compiles for the GPU (the methods register themselves)
__all__ = ["pendulum_dynamics", "pendulum_observe_at", "pendulum_reset_at", "pendulum_step_at"]


# --- scalar physics, compiled here with njit and by .cuda as CUDA device functions from the
# same Python source (``device_twin``), so the backends cannot drift -----------------------------


@njit(**JIT_EXACT_INNER)
def pendulum_dynamics(th, thdot, u, gterm):
    """gymnasium PendulumEnv.step: cost on the pre-step state, velocity first, then angle.
    gymnasium's torque ``u`` is a float32 scalar, so its two torque terms are float32 products
    (3.0 * u and 0.001 * u**2) added to float64: rounded the same way here."""
    torque_term = np.float64(np.float32(3.0 * u))
    torque_cost = np.float64(np.float32(U_COST * np.float64(np.float32(u * u))))
    cost = ((th + PI) % TWO_PI - PI) ** 2 + 0.1 * thdot**2 + torque_cost
    newthdot = thdot + (gterm * math.sin(th) + torque_term) * 0.05
    newthdot = min(max(newthdot, -8.0), 8.0)
    newth = th + newthdot * 0.05
    return newth, newthdot, cost


@njit(**JIT_EXACT_INNER)
def pendulum_observe_at(i, physics, obs):
    th = physics[i, 0]
    obs[i, 0] = math.cos(th)
    obs[i, 1] = math.sin(th)
    obs[i, 2] = physics[i, 1]


# --- per-env bodies: the CPU loops below and .cuda's kernels (``per_index``) run these ----------


@njit(**JIT_EXACT_INNER)
def pendulum_step_at(i, physics, steps, action, obs, reward, terminated, truncated, scale, gterm, max_steps):
    u = min(max(np.float64(action[i, 0]) * scale, -2.0), 2.0)
    th, thdot, cost = pendulum_dynamics(physics[i, 0], physics[i, 1], u, gterm)
    physics[i, 0] = th
    physics[i, 1] = thdot
    pendulum_observe_at(i, physics, obs)
    reward[i] = -cost
    steps[i] += 1
    terminated[i] = False
    truncated[i] = steps[i] >= max_steps


@njit(**JIT_EXACT_INNER)
def pendulum_reset_at(i, key, base, physics, steps, obs, reward, terminated, truncated, only_done):
    """Env i's initial state from stream positions ``base`` + 2i, 2i + 1."""
    if only_done and not (terminated[i] or truncated[i]):
        return
    physics[i, 0] = -PI + TWO_PI * uniform01(key, base + np.uint64(2 * i))
    physics[i, 1] = -1.0 + 2.0 * uniform01(key, base + np.uint64(2 * i + 1))
    pendulum_observe_at(i, physics, obs)
    clear_reset_at(i, steps, reward, terminated, truncated, only_done)


# --- CPU kernels -------------------------------------------------------------------------------


pendulum_step_kernel = per_env(pendulum_step_at, "pendulum_step_kernel")


pendulum_reset_kernel = per_env_reset(pendulum_reset_at, "pendulum_reset_kernel", 2)


kernel_methods(
    CPU, Pendulum, pendulum_step_kernel, pendulum_reset_kernel, numbers=("action_scale", "gterm", "max_episode_steps")
)
