"""CUDA methods of the native envs: one thread per env.

The scalar physics are the CPU backend's helpers compiled as device functions from the same
Python source (:func:`device_twin`), so CPU and CUDA evaluate identical expressions. The per-env
loop bodies stay per backend: moved into a shared function taking the env arrays, Acrobot's CPU
step ran 1.5x slower (181 vs 122 ns per env; Numba's inline="always" did not help). Imported
when a CUDA device is first created (see ``CUDA.method_modules``)."""

import math

import numpy as np
from numba import cuda

from ..backends.cuda import Launch, block_form, device_twin, grid_1d
from ..devices import CUDA
from ..kernels.core.cuda import increment_kernel
from ..kernels.random.cuda import uniform01
from ..staging import launch
from . import api, cpu
from .api import AcrobotContinuous, Pendulum

__all__: list[str] = []  # methods only: importing the module registers them

PI = math.pi
TWO_PI = 2 * math.pi

pendulum_dynamics = device_twin(cpu.pendulum_dynamics)
acrobot_dsdt = device_twin(cpu.acrobot_dsdt)
wrap_angle = device_twin(cpu.wrap_angle)
acrobot_terminal = device_twin(cpu.acrobot_terminal)
acrobot_rk4 = device_twin(cpu.acrobot_rk4, acrobot_dsdt=acrobot_dsdt, wrap_angle=wrap_angle)


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


def _launch_per_env(device, kernel, n, *args) -> None:
    launch(device, Launch(kernel, *grid_1d(n)), *args)


def _state_args(state):
    return state.physics, state.steps, state.obs, state.reward, state.terminated, state.truncated


def _reset(device, kernel, env, state, rng, only_done, draws_per_env) -> None:
    _launch_per_env(device, kernel, env.num_envs, rng, *_state_args(state), only_done)
    # the counter advances after every thread has read it (a separate launch orders the two)
    launch(device, Launch(increment_kernel, (1,), (1,)), rng, 1, np.uint64(draws_per_env * env.num_envs))


@api.env_step.dispatch
def env_step(device: CUDA, env: Pendulum, state, action):
    _launch_per_env(
        device,
        pendulum_step_kernel,
        env.num_envs,
        state.physics,
        state.steps,
        action,
        state.obs,
        state.reward,
        state.terminated,
        state.truncated,
        env.action_scale,
        cpu.pendulum_gterm(env),
        env.max_episode_steps,
    )


@api.env_reset.dispatch
def env_reset(device: CUDA, env: Pendulum, state, rng):
    _reset(device, pendulum_reset_kernel, env, state, rng, False, 2)


@api.env_reset_done.dispatch
def env_reset_done(device: CUDA, env: Pendulum, state, rng):
    _reset(device, pendulum_reset_kernel, env, state, rng, True, 2)


@api.env_step.dispatch
def env_step(device: CUDA, env: AcrobotContinuous, state, action):
    _launch_per_env(
        device,
        acrobot_step_kernel,
        env.num_envs,
        state.physics,
        state.steps,
        action,
        state.obs,
        state.reward,
        state.terminated,
        state.truncated,
        env.max_episode_steps,
    )


@api.env_reset.dispatch
def env_reset(device: CUDA, env: AcrobotContinuous, state, rng):
    _reset(device, acrobot_reset_kernel, env, state, rng, False, 4)


@api.env_reset_done.dispatch
def env_reset_done(device: CUDA, env: AcrobotContinuous, state, rng):
    _reset(device, acrobot_reset_kernel, env, state, rng, True, 4)
