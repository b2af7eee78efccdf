"""On-policy (PPO) generic functions: GAE and discounted returns with partial-episode
bootstrapping, running observation statistics, the Gaussian policy head with a state-independent
log-std and the categorical one (logits), rollout storing, shuffled minibatches and the adaptive learning rate (Adam with a learning
rate in an Array is core's ``adam_step``; the rollout structs are in dispatchrl.data.rollout).
Declarations in api, methods per backend; CUDA methods register when a CUDA device is first made."""

from . import api, c, cpu, generic, host  # noqa: F401  (importing registers the methods)
from .api import *  # noqa: F403

__all__ = list(api.__all__)
