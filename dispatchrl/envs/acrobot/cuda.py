"""CUDA methods of the Acrobots (continuous and discrete): the kernels and device functions generated from :mod:`.cpu`'s
per-env bodies and helpers, as :mod:`dispatchrl.envs.shared.cuda` says."""

from ...backends.cuda import per_index
from ..shared.cuda import device_twins, kernel_methods, per_env_reset
from . import cpu
from .env import Acrobot, AcrobotContinuous

__all__: list[str] = []  # methods only: importing the module registers them

twins = device_twins(
    cpu.acrobot_dsdt,
    cpu.wrap_angle,
    cpu.acrobot_terminal,
    cpu.acrobot_rk4,
    cpu.acrobot_observe_at,
    cpu.acrobot_torque_step_at,
    acrobot_index_torque=cpu.acrobot_index_torque,
)
acrobot_step_kernel = per_index(cpu.acrobot_step_at, "physics.shape[0]", **twins)
acrobot_discrete_step_kernel = per_index(cpu.acrobot_discrete_step_at, "physics.shape[0]", **twins)
acrobot_reset_kernel = per_env_reset(cpu.acrobot_reset_at, "acrobot_reset", **twins)


kernel_methods(AcrobotContinuous, acrobot_step_kernel, acrobot_reset_kernel, 4)
kernel_methods(Acrobot, acrobot_discrete_step_kernel, acrobot_reset_kernel, 4)
