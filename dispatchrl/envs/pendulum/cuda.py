"""CUDA methods of Pendulum: one thread per env, the kernels generated from :mod:`.cpu`'s
per-env bodies (see :mod:`dispatchrl.envs.shared.cuda`). Imported when a CUDA device is first
created (see :func:`dispatchrl.envs.registry.register_cuda_methods`)."""

from ...backends.cuda import device_twin, per_index
from ..shared.cuda import kernel_methods, per_env_reset
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


kernel_methods(
    Pendulum, pendulum_step_kernel, pendulum_reset_kernel, 2, numbers=("action_scale", "gterm", "max_episode_steps")
)
