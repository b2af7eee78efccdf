"""CUDA methods of CartPole: the kernels and device functions generated from :mod:`.cpu`'s
per-env bodies and helpers, as :mod:`dispatchrl.envs.shared.cuda` says."""

from ...backends.cuda import per_index
from ..shared.cuda import device_twins, kernel_methods, per_env_reset
from . import cpu
from .env import CartPole

__all__: list[str] = []  # methods only: importing the module registers them

twins = device_twins(cpu.cartpole_force, cpu.cartpole_physics, cpu.cartpole_terminal)
cartpole_step_kernel = per_index(cpu.cartpole_step_at, "physics.shape[0]", **twins)
cartpole_reset_kernel = per_env_reset(cpu.cartpole_reset_at, "cartpole_reset", **twins)


kernel_methods(CartPole, cartpole_step_kernel, cartpole_reset_kernel, 4)
