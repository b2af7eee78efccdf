"""How the envs' CUDA methods launch: one thread per env; a reset advances the counter stream in
a launch of its own. Imported with the envs' CUDA modules, when a CUDA device is first made."""

import numpy as np

from ...backends.cuda import Launch, grid_1d
from ...kernels.core.cuda import increment_kernel
from ...staging import launch
from . import state_args

__all__ = ["launch_per_env", "launch_reset"]


def launch_per_env(device, kernel, n, *args) -> None:
    """``kernel`` over ``n`` envs, one thread each."""
    launch(device, Launch(kernel, *grid_1d(n)), *args)


def launch_reset(device, kernel, env, state, rng, only_done, draws_per_env, *parameters) -> None:
    """A reset kernel over the envs (``rng``, the state's arrays, ``only_done``, then the env's
    ``parameters``), then ``rng[1]`` advanced by ``draws_per_env`` per env."""
    launch_per_env(device, kernel, env.num_envs, rng, *state_args(state), only_done, *parameters)
    # the counter advances after every thread has read it (a separate launch orders the two)
    launch(device, Launch(increment_kernel, (1,), (1,)), rng, 1, np.uint64(draws_per_env * env.num_envs))
