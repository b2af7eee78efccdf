"""CUDA methods of MountainCar: the kernels and device functions generated from :mod:`.cpu`'s
per-env bodies and helpers, as :mod:`dispatchrl.envs.shared.cuda` says."""

from ...backends.cuda import per_index
from ..shared.cuda import device_twins, kernel_methods, per_env_reset
from . import cpu
from .env import MountainCar

__all__: list[str] = []  # methods only: importing the module registers them

twins = device_twins(cpu.mountaincar_physics, mountaincar_push=cpu.mountaincar_push)
mountaincar_step_kernel = per_index(cpu.mountaincar_step_at, "physics.shape[0]", **twins)
mountaincar_reset_kernel = per_env_reset(cpu.mountaincar_reset_at, "mountaincar_reset", **twins)


kernel_methods(MountainCar, mountaincar_step_kernel, mountaincar_reset_kernel, 1)
