"""Environments: native batched envs as generic functions (Pendulum, continuous Acrobot) with
Generic / CPU / CUDA methods, a threaded MuJoCo Ant, a wrapper for any gymnasium Box env, and
gymnasium registration of ``dispatchrl/Pendulum-v1``, ``dispatchrl/AcrobotContinuous-v1`` and
``dispatchrl/Ant-v5`` (importing this package registers them)."""

from ..devices import CUDA
from . import generic, cpu  # noqa: F401  (importing registers the Generic and CPU methods)
from .api import (NATIVE_ENVS, AcrobotContinuous, EnvState, Pendulum, check_action, env_reset,
                  env_reset_done, env_state, env_step)

# CUDA methods register when a CUDA device is first made (numba.cuda is slow to import)
if "dispatchrl.envs.cuda" not in CUDA.method_modules:
    CUDA.method_modules.append("dispatchrl.envs.cuda")
