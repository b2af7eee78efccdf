"""On-policy (PPO) generic functions: GAE and discounted returns with partial-episode
bootstrapping, running observation statistics, the Gaussian policy head with a state-independent
log-std, rollout storage and shuffled minibatches, the adaptive learning rate and Adam with a
learning rate in an Array. Declarations in api, methods per backend; CUDA methods register when a
CUDA device is first made."""

import sys

from ...devices import CUDA
from ..c import borrow_methods
from . import api, cpu, generic  # noqa: F401  (importing registers the methods)
from .api import (adam_step_scheduled, adaptive_learning_rate, discounted_returns, gae, gather_minibatch,
                  gaussian_log_prob, gaussian_sample, normalize_observations, ppo_policy_gradient,
                  random_permutation, rollout_store, running_stats_update)
from .storage import Minibatch, ObsStats, Rollout, minibatch, obs_stats, rollout

__all__ = ["gae", "discounted_returns", "running_stats_update", "normalize_observations", "gaussian_sample",
           "gaussian_log_prob", "ppo_policy_gradient", "adaptive_learning_rate", "adam_step_scheduled",
           "rollout_store", "random_permutation", "gather_minibatch", "ObsStats", "Rollout", "Minibatch",
           "obs_stats", "rollout", "minibatch"]

# The C device runs these with the CPU methods (C arrays are host arrays) until it gets its own
borrow_methods(gae, discounted_returns, running_stats_update, normalize_observations, gaussian_sample,
               gaussian_log_prob, ppo_policy_gradient, adaptive_learning_rate, adam_step_scheduled,
               rollout_store, random_permutation, gather_minibatch)

# CUDA methods register when a CUDA device is first made; if one was made before this package
# was imported, register them now
if "dispatchrl.kernels.ppo.cuda" not in CUDA.method_modules:
    CUDA.method_modules.append("dispatchrl.kernels.ppo.cuda")
    if "dispatchrl.kernels.cuda" in sys.modules:
        from . import cuda  # noqa: F401
