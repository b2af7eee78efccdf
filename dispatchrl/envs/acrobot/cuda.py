"""CUDA methods of the Acrobots (continuous and discrete): one thread per env, the kernels generated from :mod:`.cpu`'s
per-env bodies (see :mod:`dispatchrl.envs.shared.cuda`). Imported when a CUDA device is first
created (see :func:`dispatchrl.envs.registry.register_cuda_methods`)."""

from ...backends.cuda import device_twin, per_index
from ..shared.cuda import kernel_methods, per_env_reset
from . import cpu
from .env import Acrobot, AcrobotContinuous

__all__: list[str] = []  # methods only: importing the module registers them

acrobot_dsdt = device_twin(cpu.acrobot_dsdt)
wrap_angle = device_twin(cpu.wrap_angle)
acrobot_terminal = device_twin(cpu.acrobot_terminal)
acrobot_rk4 = device_twin(cpu.acrobot_rk4, acrobot_dsdt=acrobot_dsdt, wrap_angle=wrap_angle)
acrobot_index_torque = device_twin(cpu.acrobot_index_torque)
acrobot_observe_at = device_twin(cpu.acrobot_observe_at)
acrobot_torque_step_at = device_twin(
    cpu.acrobot_torque_step_at,
    acrobot_rk4=acrobot_rk4,
    acrobot_observe_at=acrobot_observe_at,
    acrobot_terminal=acrobot_terminal,
)

acrobot_step_kernel = per_index(cpu.acrobot_step_at, "physics.shape[0]", acrobot_torque_step_at=acrobot_torque_step_at)
acrobot_discrete_step_kernel = per_index(
    cpu.acrobot_discrete_step_at,
    "physics.shape[0]",
    acrobot_index_torque=acrobot_index_torque,
    acrobot_torque_step_at=acrobot_torque_step_at,
)
acrobot_reset_kernel = per_env_reset(cpu.acrobot_reset_at, "acrobot_reset", acrobot_observe_at=acrobot_observe_at)


kernel_methods(AcrobotContinuous, acrobot_step_kernel, acrobot_reset_kernel, 4)
kernel_methods(Acrobot, acrobot_discrete_step_kernel, acrobot_reset_kernel, 4)
