"""CUDA methods of CartPole: one thread per env.

The scalar physics are the CPU backend's helpers compiled as device functions from the same Python
source (:func:`device_twin`), so CPU and CUDA evaluate identical expressions; the per-env loop
bodies stay per backend (see :mod:`dispatchrl.envs.pendulum.cuda`). Imported when a CUDA device
is first created (see :func:`dispatchrl.envs.registry.register_cuda_methods`)."""

import numpy as np
from numba import cuda

from ...backends.cuda import block_form, device_twin
from ...devices import CUDA
from ...kernels.random.cuda import uniform01
from .. import api
from ..shared import step_args
from ..shared.cuda import launch_per_env, launch_reset
from . import cpu
from .env import CartPole

__all__: list[str] = []  # methods only: importing the module registers them

cartpole_force = device_twin(cpu.cartpole_force)
cartpole_physics = device_twin(cpu.cartpole_physics)
cartpole_terminal = device_twin(cpu.cartpole_terminal)


@cuda.jit(device=True)
def _cartpole_step_at(i, physics, steps, action, obs, reward, terminated, truncated, max_steps):
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


@cuda.jit
def cartpole_step_kernel(physics, steps, action, obs, reward, terminated, truncated, max_steps):
    i = cuda.grid(1)
    if i < physics.shape[0]:
        _cartpole_step_at(i, physics, steps, action, obs, reward, terminated, truncated, max_steps)


@block_form(cartpole_step_kernel, lambda physics, *rest: (physics.shape[0],))
@cuda.jit(device=True)
def cartpole_step_block(physics, steps, action, obs, reward, terminated, truncated, max_steps, envs):
    for i in range(cuda.threadIdx.x, envs, cuda.blockDim.x):
        _cartpole_step_at(i, physics, steps, action, obs, reward, terminated, truncated, max_steps)


@cuda.jit(device=True)
def _cartpole_reset_at(i, rng, physics, steps, obs, reward, terminated, truncated, only_done):
    if not only_done or terminated[i] or truncated[i]:
        for j in range(4):
            # gymnasium's U(-0.05, 0.05), kept in float64 as gymnasium keeps it
            physics[i, j] = -0.05 + 0.1 * uniform01(rng[0], rng[1] + np.uint64(4 * i + j))
            obs[i, j] = physics[i, j]
        steps[i] = 0
        if not only_done:
            reward[i] = 0.0
            terminated[i] = False
            truncated[i] = False


@cuda.jit
def cartpole_reset_kernel(rng, physics, steps, obs, reward, terminated, truncated, only_done):
    i = cuda.grid(1)
    if i < physics.shape[0]:
        _cartpole_reset_at(i, rng, physics, steps, obs, reward, terminated, truncated, only_done)


@block_form(cartpole_reset_kernel, lambda rng, physics, *rest: (physics.shape[0],))
@cuda.jit(device=True)
def cartpole_reset_block(rng, physics, steps, obs, reward, terminated, truncated, only_done, envs):
    for i in range(cuda.threadIdx.x, envs, cuda.blockDim.x):
        _cartpole_reset_at(i, rng, physics, steps, obs, reward, terminated, truncated, only_done)


@api.env_step.dispatch
def env_step(device: CUDA, env: CartPole, state, action):
    launch_per_env(device, cartpole_step_kernel, env.num_envs, *step_args(state, action), env.max_episode_steps)


@api.env_reset.dispatch
def env_reset(device: CUDA, env: CartPole, state, rng):
    launch_reset(device, cartpole_reset_kernel, env, state, rng, False, 4)


@api.env_reset_done.dispatch
def env_reset_done(device: CUDA, env: CartPole, state, rng):
    launch_reset(device, cartpole_reset_kernel, env, state, rng, True, 4)
