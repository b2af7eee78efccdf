"""Environments.

- Native batched envs as generic functions: :class:`Pendulum`, :class:`AcrobotContinuous`,
  :class:`CartPole`, :class:`Acrobot`, :class:`MountainCar` (discrete actions: an index per env, in float32) with
  :func:`env_state`, :func:`env_reset`, :func:`env_step`, :func:`env_reset_done` (Generic, CPU,
  CUDA and C methods; fusable into training steps). :class:`NativeEnv` is the protocol they follow
  (:mod:`.api`); a user's env following it trains fused the same way, and
  :func:`register_native_env` makes it a gymnasium id.
- One package per built-in env (``pendulum/``, ``acrobot/``, ``cartpole/``, ``mountaincar/``, ``ant/``: description,
  numpy reference, kernels per backend, frame, gymnasium Env), listed in :mod:`.registry`; what
  their kernels share is in ``shared/``.
- Batches with a numpy API and same-step autoreset (see :mod:`dispatchrl.envs.batch`):
  :class:`NativeBatch`, :func:`from_gymnasium` for any gymnasium env with Box observations (Box or
  Discrete actions), and the threaded MuJoCo batches (``ant/``, ``halfcheetah/``, ``hopper/``,
  ``walker2d/``, ``humanoid/`` on ``shared/mujoco.py``): :class:`~dispatchrl.envs.ant.AntBatch`
  (``dispatchrl.envs.AntBatch``), ``HalfCheetahBatch``, ``HopperBatch``, ``Walker2dBatch``,
  ``HumanoidBatch``; they import mujoco lazily.
- gymnasium ids ``dispatchrl/Pendulum-v1``, ``dispatchrl/AcrobotContinuous-v1``,
  ``dispatchrl/CartPole-v1``, ``dispatchrl/Acrobot-v1``, ``dispatchrl/MountainCar-v0`` and
  ``dispatchrl/Ant-v5`` (and ``HalfCheetah-v5``, ``Hopper-v5``, ``Walker2d-v5``, ``Humanoid-v5``), registered when this package is imported
  (``gymnasium.make`` and ``gymnasium.make_vec`` both work).
"""

from .acrobot import Acrobot, AcrobotContinuous, AcrobotContinuousEnv, AcrobotEnv
from .api import (
    EnvState,
    NativeEnv,
    check_action,
    env_critic_observation,
    env_reset,
    env_reset_done,
    env_state,
    env_step,
)
from .batch import BatchVectorEnv, GymnasiumBatch, NativeBatch, check_actions, from_gymnasium
from .cartpole import CartPole, CartPoleEnv
from .gym import NativeGymEnv, register_native_env
from .mountaincar import MountainCar, MountainCarEnv
from .pendulum import Pendulum, PendulumEnv
from .registry import ENV_IDS, register_envs

__all__ = [
    "ENV_IDS",
    "Acrobot",
    "AcrobotContinuous",
    "AcrobotContinuousEnv",
    "AcrobotEnv",
    "AntBatch",
    "BatchVectorEnv",
    "CartPole",
    "CartPoleEnv",
    "EnvState",
    "GymnasiumBatch",
    "MountainCar",
    "MountainCarEnv",
    "NativeBatch",
    "NativeEnv",
    "NativeGymEnv",
    "Pendulum",
    "PendulumEnv",
    "check_action",
    "check_actions",
    "env_critic_observation",
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
    from .registry import MUJOCO_ENVS

    for batch_class, _ in MUJOCO_ENVS.values():
        if name == batch_class.__name__:
            return batch_class
    raise AttributeError(f"module 'dispatchrl.envs' has no attribute {name!r}")
