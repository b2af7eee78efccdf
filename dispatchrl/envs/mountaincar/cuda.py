"""CUDA methods of MountainCar: one thread per env.

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
from .env import MountainCar

__all__: list[str] = []  # methods only: importing the module registers them

mountaincar_push = device_twin(cpu.mountaincar_push)
mountaincar_physics = device_twin(cpu.mountaincar_physics)


@cuda.jit(device=True)
def _mountaincar_step_at(i, physics, steps, action, obs, reward, terminated, truncated, max_steps):
    position, velocity, done = mountaincar_physics(physics[i, 0], physics[i, 1], mountaincar_push(action[i, 0]))
    physics[i, 0] = position
    physics[i, 1] = velocity
    obs[i, 0] = position
    obs[i, 1] = velocity
    terminated[i] = done
    reward[i] = -1.0
    steps[i] += 1
    truncated[i] = steps[i] >= max_steps


@cuda.jit
def mountaincar_step_kernel(physics, steps, action, obs, reward, terminated, truncated, max_steps):
    i = cuda.grid(1)
    if i < physics.shape[0]:
        _mountaincar_step_at(i, physics, steps, action, obs, reward, terminated, truncated, max_steps)


@block_form(mountaincar_step_kernel, lambda physics, *rest: (physics.shape[0],))
@cuda.jit(device=True)
def mountaincar_step_block(physics, steps, action, obs, reward, terminated, truncated, max_steps, envs):
    for i in range(cuda.threadIdx.x, envs, cuda.blockDim.x):
        _mountaincar_step_at(i, physics, steps, action, obs, reward, terminated, truncated, max_steps)


@cuda.jit(device=True)
def _mountaincar_reset_at(i, rng, physics, steps, obs, reward, terminated, truncated, only_done):
    if not only_done or terminated[i] or truncated[i]:
        physics[i, 0] = -0.6 + 0.2 * uniform01(rng[0], rng[1] + np.uint64(i))  # gymnasium's U(-0.6, -0.4)
        physics[i, 1] = 0.0  # at rest
        obs[i, 0] = physics[i, 0]
        obs[i, 1] = 0.0
        steps[i] = 0
        if not only_done:
            reward[i] = 0.0
            terminated[i] = False
            truncated[i] = False


@cuda.jit
def mountaincar_reset_kernel(rng, physics, steps, obs, reward, terminated, truncated, only_done):
    i = cuda.grid(1)
    if i < physics.shape[0]:
        _mountaincar_reset_at(i, rng, physics, steps, obs, reward, terminated, truncated, only_done)


@block_form(mountaincar_reset_kernel, lambda rng, physics, *rest: (physics.shape[0],))
@cuda.jit(device=True)
def mountaincar_reset_block(rng, physics, steps, obs, reward, terminated, truncated, only_done, envs):
    for i in range(cuda.threadIdx.x, envs, cuda.blockDim.x):
        _mountaincar_reset_at(i, rng, physics, steps, obs, reward, terminated, truncated, only_done)


@api.env_step.dispatch
def env_step(device: CUDA, env: MountainCar, state, action):
    launch_per_env(device, mountaincar_step_kernel, env.num_envs, *step_args(state, action), env.max_episode_steps)


@api.env_reset.dispatch
def env_reset(device: CUDA, env: MountainCar, state, rng):
    launch_reset(device, mountaincar_reset_kernel, env, state, rng, False, 1)


@api.env_reset_done.dispatch
def env_reset_done(device: CUDA, env: MountainCar, state, rng):
    launch_reset(device, mountaincar_reset_kernel, env, state, rng, True, 1)
