"""C methods of the on-policy generic functions: borrowed from the CPU device (C arrays are host
arrays, so its Numba kernels run on them unchanged) until they get C blocks of their own; a fused
C step then alternates C segments with these host kernels."""

from ...backends.c import borrow_methods
from .api import (
    adaptive_learning_rate,
    discounted_returns,
    gae,
    gather_minibatch,
    gaussian_log_prob,
    gaussian_sample,
    normalize_observations,
    ppo_policy_gradient,
    random_permutation,
    rollout_store,
    running_stats_update,
)

__all__: list[str] = []

borrow_methods(
    gae,
    discounted_returns,
    running_stats_update,
    normalize_observations,
    gaussian_sample,
    gaussian_log_prob,
    ppo_policy_gradient,
    adaptive_learning_rate,
    rollout_store,
    random_permutation,
    gather_minibatch,
)
