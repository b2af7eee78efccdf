"""Off-policy generic functions (replay, column plumbing, exploration noise, TD targets, episode
log, SAC's squashed Gaussian head, DQN's ε-greedy action, targets, Huber gradient, taken-action Q
and dueling head): declarations in api, methods per backend. CUDA methods register when a CUDA
device is first made."""

from . import api, c, cpu, generic, host  # noqa: F401  (importing registers the methods)
from .api import *  # noqa: F403

__all__ = list(api.__all__)
