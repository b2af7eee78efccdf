"""On-policy (PPO) generic functions: GAE and discounted returns with partial-episode
bootstrapping, running observation statistics, the Gaussian policy head with a state-independent
log-std and the categorical one (logits), rollout storing, shuffled minibatches and the adaptive learning rate (Adam with a learning
rate in an Array is core's ``adam_step``; the rollout structs are in dispatchrl.data.rollout).
Declarations in api, methods per backend; CUDA methods register when a CUDA device is first made."""

from . import api, c, cpu, generic, host  # noqa: F401  (importing registers the methods)
from .api import (
    adaptive_learning_rate,
    categorical_sample,
    discounted_returns,
    explained_variance,
    gae,
    gather_minibatch,
    gaussian_log_prob,
    gaussian_sample,
    normalize_observations,
    ppo_categorical_gradient,
    ppo_policy_gradient,
    random_permutation,
    rollout_store,
    running_stats_update,
    scale_by_running_std,
)

__all__ = [
    "adaptive_learning_rate",
    "categorical_sample",
    "discounted_returns",
    "explained_variance",
    "gae",
    "gather_minibatch",
    "gaussian_log_prob",
    "gaussian_sample",
    "normalize_observations",
    "ppo_categorical_gradient",
    "ppo_policy_gradient",
    "random_permutation",
    "rollout_store",
    "running_stats_update",
    "scale_by_running_std",
]
