"""Structs of Arrays the on-policy (PPO) generic functions work on: running observation
statistics, a (time, envs) rollout and a minibatch. Preallocated per device, written only by
kernels (dispatchrl.kernels.onpolicy)."""

from dataclasses import dataclass

import numpy as np

from ..arrays import asarray, zeros
from ..errors import ConfigError

__all__ = ["STATS_INITIAL_COUNT", "Minibatch", "ObsStats", "Rollout", "minibatch", "obs_stats", "rollout"]

#: running observation statistics start as gymnasium's RunningMeanStd: count ε, mean 0, var 1
STATS_INITIAL_COUNT = 1e-4


@dataclass
class ObsStats:
    mean: object  # (D,) float64
    var: object  # (D,) float64
    count: object  # (1,) float64: samples folded in (starts at a tiny ε, as gymnasium's)
    nonfinite: object  # (1,) int64: updates refused because of NaN/inf observations

    def validate_checkpoint(self, values, context):
        """The sample count starts at a tiny ε and only grows; variances are never negative."""
        values.require("count", STATS_INITIAL_COUNT, np.inf, "samples folded in")
        values.require("var", 0.0, np.inf, "running variances")


def obs_stats(device, dim):
    return ObsStats(
        zeros(device, dim, np.float64),
        asarray(device, np.ones(dim)),
        asarray(device, np.full(1, STATS_INITIAL_COUNT)),
        zeros(device, 1, np.int64),
    )


@dataclass
class Rollout:
    """T steps of N envs; scalars (T, N), per-step rows (T·N, D) with row t·N + n."""

    obs: object  # (T·N, O) normalised observations the policy saw
    action: object  # (T·N, A) sampled (unclipped) actions
    mean: object  # (T·N, A) Gaussian means at sampling time (for the KL)
    log_prob: object  # (T, N)
    value: object  # (T, N) V(s_t)
    next_value: object  # (T, N) V(s_{t+1}), of the final observation where an episode ended
    reward: object  # (T, N)
    terminated: object  # (T, N) bool
    truncated: object  # (T, N) bool
    advantage: object  # (T, N)
    returns: object  # (T, N)


def _positive(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ConfigError(f"rollout: '{name}' must be a positive int, got {value!r}")


def rollout(device, steps, envs, obs_dim, action_dim, dtype=np.float32):
    for name, value in (("steps", steps), ("envs", envs), ("obs_dim", obs_dim), ("action_dim", action_dim)):
        _positive(name, value)
    rows = steps * envs
    scalars = [zeros(device, (steps, envs), dtype) for _ in range(4)]
    return Rollout(
        zeros(device, (rows, obs_dim), dtype),
        zeros(device, (rows, action_dim), dtype),
        zeros(device, (rows, action_dim), dtype),
        *scalars,
        zeros(device, (steps, envs), np.bool_),
        zeros(device, (steps, envs), np.bool_),
        zeros(device, (steps, envs), dtype),
        zeros(device, (steps, envs), dtype),
    )


@dataclass
class Minibatch:
    obs: object  # (B, O)
    action: object  # (B, A)
    mean: object  # (B, A)
    log_prob: object  # (B,)
    advantage: object  # (B,)
    returns: object  # (B, 1): the critic's regression target


def minibatch(device, rows, obs_dim, action_dim, dtype=np.float32):
    _positive("rows", rows)
    return Minibatch(
        zeros(device, (rows, obs_dim), dtype),
        zeros(device, (rows, action_dim), dtype),
        zeros(device, (rows, action_dim), dtype),
        zeros(device, rows, dtype),
        zeros(device, rows, dtype),
        zeros(device, (rows, 1), dtype),
    )
