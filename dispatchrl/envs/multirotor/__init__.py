"""A quadrotor learning to hover, after "Learning to Fly in Seconds" (RLtools' l2f simulator): its
description and physical parameters (``env.py``), the numpy reference (``generic.py``), the CPU
and C kernels (``cpu.py``, ``c.py``; ``layout.py`` is what they share), the flight evaluation
(``evaluation.py``), its frame (``render.py``) and gymnasium Env (``gym.py``). Importing the
package registers the Generic, CPU and C methods."""

from . import c, cpu, generic  # noqa: F401  (importing registers the methods)
from .env import CRAZYFLIE, Multirotor, MultirotorParameters
from .gym import GYMNASIUM_SPEC, MultirotorEnv, make_multirotor_vector
from .render import multirotor_frame

__all__ = [
    "CRAZYFLIE",
    "GYMNASIUM_SPEC",
    "Multirotor",
    "MultirotorEnv",
    "MultirotorParameters",
    "make_multirotor_vector",
    "multirotor_frame",
]
