"""CUDA methods of MountainCar: one thread per env, the kernels generated from :mod:`.cpu`'s
per-env bodies (see :mod:`dispatchrl.envs.shared.cuda`). Imported when a CUDA device is first
created (see :func:`dispatchrl.envs.registry.register_cuda_methods`)."""

from ...backends.cuda import device_twin, per_index
from ..shared.cuda import kernel_methods, per_env_reset
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


kernel_methods(MountainCar, mountaincar_step_kernel, mountaincar_reset_kernel, 1)
