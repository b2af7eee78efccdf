"""CUDA methods of Pendulum: the kernels and device functions generated from :mod:`.cpu`'s
per-env bodies and helpers, as :mod:`dispatchrl.envs.shared.cuda` says."""

from ...backends.cuda import per_index
from ..shared.cuda import device_twins, kernel_methods, per_env_reset
from . import cpu
from .env import Pendulum

__all__: list[str] = []  # methods only: importing the module registers them

twins = device_twins(cpu.pendulum_dynamics, cpu.pendulum_observe_at)
pendulum_step_kernel = per_index(cpu.pendulum_step_at, "physics.shape[0]", **twins)
pendulum_reset_kernel = per_env_reset(cpu.pendulum_reset_at, "pendulum_reset", **twins)


kernel_methods(
    Pendulum, pendulum_step_kernel, pendulum_reset_kernel, 2, numbers=("action_scale", "gterm", "max_episode_steps")
)
