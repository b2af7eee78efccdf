"""CUDA methods of the Acrobots (continuous and discrete): one thread per env.

The scalar physics are the CPU backend's helpers compiled as device functions from the same Python
source (:func:`device_twin`), so CPU and CUDA evaluate identical expressions; the per-env loop
bodies stay per backend (see :mod:`dispatchrl.envs.pendulum.cuda`). Imported when a CUDA device
is first created (see :func:`dispatchrl.envs.registry.register_cuda_methods`)."""

import math

import numpy as np
from numba import cuda

from ...backends.cuda import block_form, device_twin
from ...devices import CUDA
from ...kernels.random.cuda import uniform01
from .. import api
from ..shared import step_args
from ..shared.cuda import launch_per_env, launch_reset
from . import cpu
from .env import Acrobot, AcrobotContinuous

__all__: list[str] = []  # methods only: importing the module registers them

acrobot_dsdt = device_twin(cpu.acrobot_dsdt)
wrap_angle = device_twin(cpu.wrap_angle)
acrobot_terminal = device_twin(cpu.acrobot_terminal)
acrobot_rk4 = device_twin(cpu.acrobot_rk4, acrobot_dsdt=acrobot_dsdt, wrap_angle=wrap_angle)
acrobot_index_torque = device_twin(cpu.acrobot_index_torque)


@cuda.jit(device=True)
def _acrobot_step_at(i, physics, steps, action, obs, reward, terminated, truncated, max_steps):
    torque = min(max(np.float64(action[i, 0]), -1.0), 1.0)
    s0, s1, s2, s3 = acrobot_rk4(physics[i, 0], physics[i, 1], physics[i, 2], physics[i, 3], torque)
    physics[i, 0] = s0
    physics[i, 1] = s1
    physics[i, 2] = s2
    physics[i, 3] = s3
    obs[i, 0] = math.cos(s0)
    obs[i, 1] = math.sin(s0)
    obs[i, 2] = math.cos(s1)
    obs[i, 3] = math.sin(s1)
    obs[i, 4] = s2
    obs[i, 5] = s3
    done = acrobot_terminal(s0, s1)
    reward[i] = 0.0 if done else -1.0
    terminated[i] = done
    steps[i] += 1
    truncated[i] = steps[i] >= max_steps


@cuda.jit
def acrobot_step_kernel(physics, steps, action, obs, reward, terminated, truncated, max_steps):
    i = cuda.grid(1)
    if i < physics.shape[0]:
        _acrobot_step_at(i, physics, steps, action, obs, reward, terminated, truncated, max_steps)


@block_form(acrobot_step_kernel, lambda physics, *rest: (physics.shape[0],))
@cuda.jit(device=True)
def acrobot_step_block(physics, steps, action, obs, reward, terminated, truncated, max_steps, envs):
    for i in range(cuda.threadIdx.x, envs, cuda.blockDim.x):
        _acrobot_step_at(i, physics, steps, action, obs, reward, terminated, truncated, max_steps)


@cuda.jit(device=True)
def _acrobot_discrete_step_at(i, physics, steps, action, obs, reward, terminated, truncated, max_steps):
    torque = acrobot_index_torque(action[i, 0])
    s0, s1, s2, s3 = acrobot_rk4(physics[i, 0], physics[i, 1], physics[i, 2], physics[i, 3], torque)
    physics[i, 0] = s0
    physics[i, 1] = s1
    physics[i, 2] = s2
    physics[i, 3] = s3
    obs[i, 0] = math.cos(s0)
    obs[i, 1] = math.sin(s0)
    obs[i, 2] = math.cos(s1)
    obs[i, 3] = math.sin(s1)
    obs[i, 4] = s2
    obs[i, 5] = s3
    done = acrobot_terminal(s0, s1)
    reward[i] = 0.0 if done else -1.0
    terminated[i] = done
    steps[i] += 1
    truncated[i] = steps[i] >= max_steps


@cuda.jit
def acrobot_discrete_step_kernel(physics, steps, action, obs, reward, terminated, truncated, max_steps):
    i = cuda.grid(1)
    if i < physics.shape[0]:
        _acrobot_discrete_step_at(i, physics, steps, action, obs, reward, terminated, truncated, max_steps)


@block_form(acrobot_discrete_step_kernel, lambda physics, *rest: (physics.shape[0],))
@cuda.jit(device=True)
def acrobot_discrete_step_block(physics, steps, action, obs, reward, terminated, truncated, max_steps, envs):
    for i in range(cuda.threadIdx.x, envs, cuda.blockDim.x):
        _acrobot_discrete_step_at(i, physics, steps, action, obs, reward, terminated, truncated, max_steps)


@cuda.jit(device=True)
def _acrobot_reset_at(i, rng, physics, steps, obs, reward, terminated, truncated, only_done):
    if not only_done or terminated[i] or truncated[i]:
        for j in range(4):
            # gymnasium draws the reset state in float64 and stores it as float32
            physics[i, j] = np.float32(-0.1 + 0.2 * uniform01(rng[0], rng[1] + np.uint64(4 * i + j)))
        obs[i, 0] = math.cos(physics[i, 0])
        obs[i, 1] = math.sin(physics[i, 0])
        obs[i, 2] = math.cos(physics[i, 1])
        obs[i, 3] = math.sin(physics[i, 1])
        obs[i, 4] = physics[i, 2]
        obs[i, 5] = physics[i, 3]
        steps[i] = 0
        if not only_done:
            reward[i] = 0.0
            terminated[i] = False
            truncated[i] = False


@cuda.jit
def acrobot_reset_kernel(rng, physics, steps, obs, reward, terminated, truncated, only_done):
    i = cuda.grid(1)
    if i < physics.shape[0]:
        _acrobot_reset_at(i, rng, physics, steps, obs, reward, terminated, truncated, only_done)


@block_form(acrobot_reset_kernel, lambda rng, physics, *rest: (physics.shape[0],))
@cuda.jit(device=True)
def acrobot_reset_block(rng, physics, steps, obs, reward, terminated, truncated, only_done, envs):
    for i in range(cuda.threadIdx.x, envs, cuda.blockDim.x):
        _acrobot_reset_at(i, rng, physics, steps, obs, reward, terminated, truncated, only_done)


@api.env_step.dispatch
def env_step(device: CUDA, env: AcrobotContinuous, state, action):
    launch_per_env(device, acrobot_step_kernel, env.num_envs, *step_args(state, action), env.max_episode_steps)


@api.env_reset.dispatch
def env_reset(device: CUDA, env: AcrobotContinuous, state, rng):
    launch_reset(device, acrobot_reset_kernel, env, state, rng, False, 4)


@api.env_reset_done.dispatch
def env_reset_done(device: CUDA, env: AcrobotContinuous, state, rng):
    launch_reset(device, acrobot_reset_kernel, env, state, rng, True, 4)


@api.env_step.dispatch
def env_step(device: CUDA, env: Acrobot, state, action):
    launch_per_env(device, acrobot_discrete_step_kernel, env.num_envs, *step_args(state, action), env.max_episode_steps)


@api.env_reset.dispatch
def env_reset(device: CUDA, env: Acrobot, state, rng):
    launch_reset(device, acrobot_reset_kernel, env, state, rng, False, 4)


@api.env_reset_done.dispatch
def env_reset_done(device: CUDA, env: Acrobot, state, rng):
    launch_reset(device, acrobot_reset_kernel, env, state, rng, True, 4)
