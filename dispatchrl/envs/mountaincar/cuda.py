"""CUDA methods of MountainCar: one thread per env, the kernels generated from :mod:`.cpu`'s
per-env bodies (see :mod:`dispatchrl.envs.shared.cuda`). Imported when a CUDA device is first
created (see :func:`dispatchrl.envs.registry.register_cuda_methods`)."""

from ...backends.cuda import device_twin, per_index
from ...devices import CUDA
from .. import api
from ..shared.cuda import launch_reset, launch_step, per_env_reset
from . import cpu
from .env import MountainCar

__all__: list[str] = []  # methods only: importing the module registers them

mountaincar_push = device_twin(cpu.mountaincar_push)
mountaincar_physics = device_twin(cpu.mountaincar_physics)

mountaincar_step_kernel = per_index(
    cpu.mountaincar_step_at,
    "physics.shape[0]",
    mountaincar_push=mountaincar_push,
    mountaincar_physics=mountaincar_physics,
)
mountaincar_reset_kernel = per_env_reset(cpu.mountaincar_reset_at, "mountaincar_reset")


@api.env_step.dispatch
def env_step(device: CUDA, env: MountainCar, state, action):
    launch_step(device, mountaincar_step_kernel, env, state, action, env.max_episode_steps)


@api.env_reset.dispatch
def env_reset(device: CUDA, env: MountainCar, state, rng):
    launch_reset(device, mountaincar_reset_kernel, env, state, rng, False, 1)


@api.env_reset_done.dispatch
def env_reset_done(device: CUDA, env: MountainCar, state, rng):
    launch_reset(device, mountaincar_reset_kernel, env, state, rng, True, 1)
