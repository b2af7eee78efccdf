"""CUDA methods of CartPole: one thread per env, the kernels generated from :mod:`.cpu`'s
per-env bodies (see :mod:`dispatchrl.envs.shared.cuda`). Imported when a CUDA device is first
created (see :func:`dispatchrl.envs.registry.register_cuda_methods`)."""

from ...backends.cuda import device_twin, per_index
from ..shared.cuda import kernel_methods, per_env_reset
from . import cpu
from .env import CartPole

__all__: list[str] = []  # methods only: importing the module registers them

cartpole_force = device_twin(cpu.cartpole_force)
cartpole_physics = device_twin(cpu.cartpole_physics)
cartpole_terminal = device_twin(cpu.cartpole_terminal)

cartpole_step_kernel = per_index(
    cpu.cartpole_step_at,
    "physics.shape[0]",
    cartpole_force=cartpole_force,
    cartpole_physics=cartpole_physics,
    cartpole_terminal=cartpole_terminal,
)
cartpole_reset_kernel = per_env_reset(cpu.cartpole_reset_at, "cartpole_reset")


kernel_methods(CartPole, cartpole_step_kernel, cartpole_reset_kernel, 4)
