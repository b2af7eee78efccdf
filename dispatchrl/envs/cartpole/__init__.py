"""gymnasium CartPole-v1 as a native env with discrete actions: its description (``env.py``), the
numpy reference (``generic.py``), the CPU, CUDA and C kernels (``cpu.py``, ``cuda.py``, ``c.py``),
its frame (``render.py``) and gymnasium Env (``gym.py``). Importing the package registers the
Generic, CPU and C methods; the CUDA ones register when a CUDA device is first made (see
:func:`dispatchrl.envs.registry.register_cuda_methods`)."""

from . import c, cpu, generic  # noqa: F401  (importing registers the methods)
from .env import CartPole
from .gym import GYMNASIUM_SPEC, CartPoleEnv, make_cartpole_vector
from .render import cartpole_frame

__all__ = ["GYMNASIUM_SPEC", "CartPole", "CartPoleEnv", "cartpole_frame", "make_cartpole_vector"]
