"""gymnasium Acrobot-v1 as native envs, with a continuous torque (:class:`AcrobotContinuous`) and
with gymnasium's three actions (:class:`Acrobot`): their descriptions (``env.py``),
the numpy reference (``generic.py``), the CPU, CUDA and C kernels (``cpu.py``, ``cuda.py``,
``c.py``), its frame (``render.py``) and gymnasium Env (``gym.py``). Importing the package
registers the Generic, CPU and C methods; the CUDA ones register when a CUDA device is first made
(see :func:`dispatchrl.envs.registry.register_cuda_methods`)."""

from . import c, cpu, generic  # noqa: F401  (importing registers the methods)
from .env import Acrobot, AcrobotContinuous
from .gym import (
    DISCRETE_GYMNASIUM_SPEC,
    GYMNASIUM_SPEC,
    AcrobotContinuousEnv,
    AcrobotEnv,
    make_acrobot_discrete_vector,
    make_acrobot_vector,
)
from .render import acrobot_frame

__all__ = [
    "DISCRETE_GYMNASIUM_SPEC",
    "GYMNASIUM_SPEC",
    "Acrobot",
    "AcrobotContinuous",
    "AcrobotContinuousEnv",
    "AcrobotEnv",
    "acrobot_frame",
    "make_acrobot_discrete_vector",
    "make_acrobot_vector",
]
