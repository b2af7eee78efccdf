"""Environments.

- Native batched envs as generic functions: :class:`Pendulum`, :class:`AcrobotContinuous` with
  :func:`env_state`, :func:`env_reset`, :func:`env_step`, :func:`env_reset_done` (Generic, CPU
  and CUDA methods; fusable into training steps). :class:`NativeEnv` is the protocol they follow;
  a user's env following it trains fused the same way, and :func:`register_native_env` makes it
  a gymnasium id.
- Batches with a numpy API and same-step autoreset (see :mod:`dispatchrl.envs.batch`):
  :class:`NativeBatch`, :func:`from_gymnasium` for any gymnasium Box env, and the threaded MuJoCo
  :class:`~dispatchrl.envs.ant.AntBatch` (``dispatchrl.envs.AntBatch``; imports mujoco lazily).
- gymnasium ids ``dispatchrl/Pendulum-v1``, ``dispatchrl/AcrobotContinuous-v1`` and
  ``dispatchrl/Ant-v5``, registered when this package is imported (``gymnasium.make`` and
  ``gymnasium.make_vec`` both work).
"""

from . import (  # noqa: F401  (importing registers the Generic and CPU methods)
    c,
    cpu,
    generic,
)
from .api import (
    AcrobotContinuous,
    EnvState,
    NativeEnv,
    Pendulum,
    check_action,
    env_reset,
    env_reset_done,
    env_state,
    env_step,
)
from .batch import BatchVectorEnv, GymnasiumBatch, NativeBatch, check_actions, from_gymnasium
from .gym import ENV_IDS, AcrobotContinuousEnv, NativeGymEnv, PendulumEnv, register_envs, register_native_env

__all__ = [
    "ENV_IDS",
    "AcrobotContinuous",
    "AcrobotContinuousEnv",
    "AntBatch",
    "BatchVectorEnv",
    "EnvState",
    "GymnasiumBatch",
    "NativeBatch",
    "NativeEnv",
    "NativeGymEnv",
    "Pendulum",
    "PendulumEnv",
    "check_action",
    "check_actions",
    "env_reset",
    "env_reset_done",
    "env_state",
    "env_step",
    "from_gymnasium",
    "register_envs",
    "register_native_env",
]

# CUDA methods register when a CUDA device is first made (dispatchrl.devices.CUDA.method_modules)
register_envs()


def __getattr__(name):
    if name == "AntBatch":  # lazily: the ant module is light, but keep mujoco users explicit
        from .ant import AntBatch

        return AntBatch
    raise AttributeError(f"module 'dispatchrl.envs' has no attribute {name!r}")
