"""CPU methods of Pendulum: one Numba loop over the N envs per call.

The per-env physics mirror gymnasium's expressions term by term (same constants, same evaluation
order, float64, no fastmath) so trajectories match gymnasium's. The scalar helper is also
compiled as a CUDA device function by :mod:`.cuda` from this very source. Helpers live in this
file so Numba's per-file cache check covers them.
"""

import math

import numpy as np
from numba import njit

from ...backends.cpu import JIT_EXACT
from ...devices import CPU
from ...kernels.random.cpu import uniform01
from ...staging import launch
from .. import api
from ..shared import PI, TWO_PI, state_args, step_args
from .env import U_COST, Pendulum

#: what .cuda compiles as a device function (the methods register themselves)
__all__ = ["pendulum_dynamics"]


# --- scalar physics, compiled here with njit and by .cuda as a CUDA device function from the
# same Python source (``device_twin``), so the backends cannot drift -----------------------------


@njit(**JIT_EXACT)
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


# --- CPU kernels -------------------------------------------------------------------------------


@njit(**JIT_EXACT)
def pendulum_step_kernel(physics, steps, action, obs, reward, terminated, truncated, scale, gterm, max_steps):
    for i in range(physics.shape[0]):
        u = min(max(np.float64(action[i, 0]) * scale, -2.0), 2.0)
        th, thdot, cost = pendulum_dynamics(physics[i, 0], physics[i, 1], u, gterm)
        physics[i, 0] = th
        physics[i, 1] = thdot
        obs[i, 0] = math.cos(th)
        obs[i, 1] = math.sin(th)
        obs[i, 2] = thdot
        reward[i] = -cost
        steps[i] += 1
        terminated[i] = False
        truncated[i] = steps[i] >= max_steps


@njit(**JIT_EXACT)
def pendulum_reset_kernel(rng, physics, steps, obs, reward, terminated, truncated, only_done):
    key, base = rng[0], rng[1]
    for i in range(physics.shape[0]):
        if only_done and not (terminated[i] or truncated[i]):
            continue
        th = -PI + TWO_PI * uniform01(key, base + np.uint64(2 * i))
        thdot = -1.0 + 2.0 * uniform01(key, base + np.uint64(2 * i + 1))
        physics[i, 0] = th
        physics[i, 1] = thdot
        obs[i, 0] = math.cos(th)
        obs[i, 1] = math.sin(th)
        obs[i, 2] = thdot
        steps[i] = 0
        if not only_done:
            reward[i] = 0.0
            terminated[i] = False
            truncated[i] = False
    rng[1] = base + np.uint64(2 * physics.shape[0])


@api.env_step.dispatch
def env_step(device: CPU, env: Pendulum, state, action):
    launch(device, pendulum_step_kernel, *step_args(state, action), env.action_scale, env.gterm, env.max_episode_steps)


@api.env_reset.dispatch
def env_reset(device: CPU, env: Pendulum, state, rng):
    launch(device, pendulum_reset_kernel, rng, *state_args(state), False)


@api.env_reset_done.dispatch
def env_reset_done(device: CPU, env: Pendulum, state, rng):
    launch(device, pendulum_reset_kernel, rng, *state_args(state), True)
