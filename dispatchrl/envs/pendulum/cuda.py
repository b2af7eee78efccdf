"""CUDA methods of Pendulum: one thread per env, the kernels generated from :mod:`.cpu`'s
per-env bodies (see :mod:`dispatchrl.envs.shared.cuda`). Imported when a CUDA device is first
created (see :func:`dispatchrl.envs.registry.register_cuda_methods`)."""

from ...backends.cuda import device_twin, per_index
from ...devices import CUDA
from .. import api
from ..shared.cuda import launch_reset, launch_step, per_env_reset
from . import cpu
from .env import Pendulum

__all__: list[str] = []  # methods only: importing the module registers them

pendulum_dynamics = device_twin(cpu.pendulum_dynamics)
pendulum_observe_at = device_twin(cpu.pendulum_observe_at)

pendulum_step_kernel = per_index(
    cpu.pendulum_step_at,
    "physics.shape[0]",
    pendulum_dynamics=pendulum_dynamics,
    pendulum_observe_at=pendulum_observe_at,
)
pendulum_reset_kernel = per_env_reset(cpu.pendulum_reset_at, "pendulum_reset", pendulum_observe_at=pendulum_observe_at)


@api.env_step.dispatch
def env_step(device: CUDA, env: Pendulum, state, action):
    launch_step(device, pendulum_step_kernel, env, state, action, env.action_scale, env.gterm, env.max_episode_steps)


@api.env_reset.dispatch
def env_reset(device: CUDA, env: Pendulum, state, rng):
    launch_reset(device, pendulum_reset_kernel, env, state, rng, False, 2)


@api.env_reset_done.dispatch
def env_reset_done(device: CUDA, env: Pendulum, state, rng):
    launch_reset(device, pendulum_reset_kernel, env, state, rng, True, 2)
