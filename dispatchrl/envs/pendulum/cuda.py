"""CUDA methods of Pendulum: one thread per env.

The scalar physics is the CPU backend's helper compiled as a device function from the same Python
source (:func:`device_twin`), so CPU and CUDA evaluate identical expressions. The per-env loop
bodies stay per backend: moved into a shared function taking the env arrays, Acrobot's CPU step
ran 1.5x slower (181 vs 122 ns per env; Numba's inline="always" did not help). Imported when a
CUDA device is first created (see :func:`dispatchrl.envs.registry.register_cuda_methods`)."""

import math

import numpy as np
from numba import cuda

from ...backends.cuda import block_form, device_twin
from ...devices import CUDA
from ...kernels.random.cuda import uniform01
from .. import api
from ..shared import PI, TWO_PI, step_args
from ..shared.cuda import launch_per_env, launch_reset
from . import cpu
from .env import Pendulum

__all__: list[str] = []  # methods only: importing the module registers them

pendulum_dynamics = device_twin(cpu.pendulum_dynamics)


@cuda.jit(device=True)
def _pendulum_step_at(i, physics, steps, action, obs, reward, terminated, truncated, scale, gterm, max_steps):
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


@cuda.jit
def pendulum_step_kernel(physics, steps, action, obs, reward, terminated, truncated, scale, gterm, max_steps):
    i = cuda.grid(1)
    if i < physics.shape[0]:
        _pendulum_step_at(i, physics, steps, action, obs, reward, terminated, truncated, scale, gterm, max_steps)


@block_form(pendulum_step_kernel, lambda physics, *rest: (physics.shape[0],))
@cuda.jit(device=True)
def pendulum_step_block(physics, steps, action, obs, reward, terminated, truncated, scale, gterm, max_steps, envs):
    for i in range(cuda.threadIdx.x, envs, cuda.blockDim.x):
        _pendulum_step_at(i, physics, steps, action, obs, reward, terminated, truncated, scale, gterm, max_steps)


@cuda.jit(device=True)
def _pendulum_reset_at(i, rng, physics, steps, obs, reward, terminated, truncated, only_done):
    if not only_done or terminated[i] or truncated[i]:
        th = -PI + TWO_PI * uniform01(rng[0], rng[1] + np.uint64(2 * i))
        thdot = -1.0 + 2.0 * uniform01(rng[0], rng[1] + np.uint64(2 * i + 1))
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


@cuda.jit
def pendulum_reset_kernel(rng, physics, steps, obs, reward, terminated, truncated, only_done):
    i = cuda.grid(1)
    if i < physics.shape[0]:
        _pendulum_reset_at(i, rng, physics, steps, obs, reward, terminated, truncated, only_done)


@block_form(pendulum_reset_kernel, lambda rng, physics, *rest: (physics.shape[0],))
@cuda.jit(device=True)
def pendulum_reset_block(rng, physics, steps, obs, reward, terminated, truncated, only_done, envs):
    for i in range(cuda.threadIdx.x, envs, cuda.blockDim.x):
        _pendulum_reset_at(i, rng, physics, steps, obs, reward, terminated, truncated, only_done)


@api.env_step.dispatch
def env_step(device: CUDA, env: Pendulum, state, action):
    launch_per_env(
        device,
        pendulum_step_kernel,
        env.num_envs,
        *step_args(state, action),
        env.action_scale,
        env.gterm,
        env.max_episode_steps,
    )


@api.env_reset.dispatch
def env_reset(device: CUDA, env: Pendulum, state, rng):
    launch_reset(device, pendulum_reset_kernel, env, state, rng, False, 2)


@api.env_reset_done.dispatch
def env_reset_done(device: CUDA, env: Pendulum, state, rng):
    launch_reset(device, pendulum_reset_kernel, env, state, rng, True, 2)
