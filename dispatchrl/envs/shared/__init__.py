"""What every native env's kernels share, whatever the env and backend: the constants they read
and the :class:`~dispatchrl.envs.api.EnvState` arrays in the order the kernels take them.
Per-backend helpers shared by the env packages sit beside it (``shared/generic.py``,
``shared/cuda.py``, ``shared/c.py``)."""

import math

__all__ = ["PI", "STATE_FIELDS", "TWO_PI", "state_args", "step_args"]

PI = math.pi
TWO_PI = 2 * math.pi

#: the EnvState arrays every env kernel takes, in launch order
STATE_FIELDS = ("physics", "steps", "obs", "reward", "terminated", "truncated")


def state_args(state) -> tuple:
    """``state``'s arrays in :data:`STATE_FIELDS` order."""
    return state.physics, state.steps, state.obs, state.reward, state.terminated, state.truncated


def step_args(state, action) -> tuple:
    """A step kernel's arrays: ``state``'s, with ``action`` after the step counters."""
    return state.physics, state.steps, action, state.obs, state.reward, state.terminated, state.truncated
