"""The built-in envs, one package each (``envs/pendulum/``, ``envs/acrobot/``, ``envs/cartpole/``,
``envs/mountaincar/``, ``envs/multirotor/``, and the threaded MuJoCo batches ``envs/ant/``,
``envs/halfcheetah/``, ``envs/hopper/``, ``envs/walker2d/``, ``envs/humanoid/``).
Adding one: its folder, and its lines in the tables here."""

from collections.abc import Callable

import gymnasium

from . import acrobot, ant, cartpole, halfcheetah, hopper, humanoid, mountaincar, multirotor, pendulum, walker2d
from .acrobot import Acrobot, AcrobotContinuous
from .api import NativeEnv
from .cartpole import CartPole
from .mountaincar import MountainCar
from .multirotor import Multirotor
from .pendulum import Pendulum

__all__ = [
    "ENV_IDS",
    "GYMNASIUM_SPECS",
    "MUJOCO_ENVS",
    "NAMED_ENVS",
    "mujoco_env",
    "register_cuda_methods",
    "register_envs",
]

#: env names the command line and checkpoints use for the built-in native envs → their class
NAMED_ENVS: dict[str, Callable[..., NativeEnv]] = {
    "pendulum": Pendulum,
    "pendulum-v1": Pendulum,
    "acrobot": AcrobotContinuous,
    "acrobotcontinuous-v1": AcrobotContinuous,
    "acrobot-v1": Acrobot,  # gymnasium's own, discrete ("acrobot" stays the continuous one)
    "cartpole": CartPole,
    "cartpole-v1": CartPole,
    "mountaincar": MountainCar,
    "mountaincar-v0": MountainCar,
    "multirotor": Multirotor,
}

#: ``gymnasium.register`` arguments of the dispatchrl ids. Entry points are the classes and
#: functions themselves, not "module:name" strings, so the import graph shows every module that
#: makes these envs
GYMNASIUM_SPECS = (
    pendulum.GYMNASIUM_SPEC,
    acrobot.GYMNASIUM_SPEC,
    ant.GYMNASIUM_SPEC,
    cartpole.GYMNASIUM_SPEC,
    acrobot.DISCRETE_GYMNASIUM_SPEC,
    mountaincar.GYMNASIUM_SPEC,
    multirotor.GYMNASIUM_SPEC,
    halfcheetah.GYMNASIUM_SPEC,
    hopper.GYMNASIUM_SPEC,
    walker2d.GYMNASIUM_SPEC,
    humanoid.GYMNASIUM_SPEC,
)
ENV_IDS = tuple(spec["id"] for spec in GYMNASIUM_SPECS)


#: the threaded MuJoCo batches by short name (the command line's) → (batch class, dispatchrl id).
#: Their classes import mujoco only when a batch is made
MUJOCO_ENVS: dict[str, tuple[type, str]] = {
    "ant": (ant.AntBatch, "dispatchrl/Ant-v5"),
    "halfcheetah": (halfcheetah.HalfCheetahBatch, "dispatchrl/HalfCheetah-v5"),
    "hopper": (hopper.HopperBatch, "dispatchrl/Hopper-v5"),
    "walker2d": (walker2d.Walker2dBatch, "dispatchrl/Walker2d-v5"),
    "humanoid": (humanoid.HumanoidBatch, "dispatchrl/Humanoid-v5"),
}


def mujoco_env(env: object) -> str | None:
    """The :data:`MUJOCO_ENVS` short name ``env`` names (``"hopper"``, ``"Hopper-v5"``,
    ``"dispatchrl/Hopper-v5"``, any case), else None."""
    if not isinstance(env, str):
        return None
    name = env.lower().removeprefix("dispatchrl/").removesuffix("-v5")
    return name if name in MUJOCO_ENVS else None


def register_envs() -> None:
    """Register the dispatchrl ids with gymnasium (idempotent)."""
    for spec in GYMNASIUM_SPECS:
        if spec["id"] not in gymnasium.registry:
            gymnasium.register(**spec)


def register_cuda_methods() -> None:
    """Register the built-in envs' CUDA methods: run when a CUDA device is first made
    (``dispatchrl.devices.CUDA.method_modules`` names :mod:`dispatchrl.envs.cuda`, which calls
    this), as importing numba.cuda is slow and CPU-only users should not pay for it."""
    from .acrobot import cuda as acrobot_cuda  # noqa: F401
    from .cartpole import cuda as cartpole_cuda  # noqa: F401
    from .mountaincar import cuda as mountaincar_cuda  # noqa: F401
    from .multirotor import cuda as multirotor_cuda  # noqa: F401
    from .pendulum import cuda as pendulum_cuda  # noqa: F401
