"""Structs of Arrays the on-policy (PPO) generic functions work on: running observation
statistics, a (time, envs) rollout and a minibatch. Preallocated per device, written only by
kernels (dispatchrl.kernels.onpolicy)."""

from dataclasses import dataclass

import numpy as np

from ..arrays import Array, asarray, zeros
from ..errors import ConfigError
from .tensordict import TensorDict

__all__ = ["STATS_INITIAL_COUNT", "Minibatch", "ObsStats", "Rollout", "minibatch", "obs_stats", "rollout"]

#: running observation statistics start as gymnasium's RunningMeanStd: count ε, mean 0, var 1
STATS_INITIAL_COUNT = 1e-4


@dataclass
class ObsStats:
    mean: Array  # (D,) float64
    var: Array  # (D,) float64
    count: Array  # (1,) float64: samples folded in (starts at a tiny ε, as gymnasium's)
    nonfinite: Array  # (1,) int64: updates refused because of NaN/inf observations

    def validate_checkpoint(self, values, context) -> None:
        """The sample count starts at a tiny ε and only grows; variances are never negative."""
        values.require("count", STATS_INITIAL_COUNT, np.inf, "samples folded in")
        values.require("var", 0.0, np.inf, "running variances")


def obs_stats(device, dim):
    """Running mean and variance of ``dim`` observation features on ``device`` (PPO's normalisation)."""
    return ObsStats(
        mean=zeros(device, dim, np.float64),
        var=asarray(device, np.ones(dim)),
        count=asarray(device, np.full(1, STATS_INITIAL_COUNT)),
        nonfinite=zeros(device, 1, np.int64),
    )


@dataclass
class Rollout:
    """T steps of N envs; scalars (T, N), per-step rows (T·N, D) with row t·N + n.

    A dataclass, not a TensorDict: its leaves share no leading batch shape. The kernels take the
    scalars as (T, N) (GAE runs back in time per env) and the rows as (T·N, D) (the networks'
    inputs), so one batch size would change the shapes the kernels are traced with."""

    obs: Array  # (T·N, O) normalised observations the policy saw
    action: Array  # (T·N, A) sampled (unclipped) actions
    mean: Array  # (T·N, M) the policy's parameters at sampling time (for the KL): Gaussian means, or logits
    log_prob: Array  # (T, N)
    value: Array  # (T, N) V(s_t)
    next_value: Array  # (T, N) V(s_{t+1}), of the final observation where an episode ended
    reward: Array  # (T, N)
    terminated: Array  # (T, N) bool
    truncated: Array  # (T, N) bool
    advantage: Array  # (T, N)
    returns: Array  # (T, N)


def _positive(name, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ConfigError(f"rollout: '{name}' must be a positive int, got {value!r}")


def rollout(device, steps, envs, obs_dim, action_dim, dtype=np.float32, mean_dim=None):
    """An empty :class:`Rollout` of ``steps`` steps of ``envs`` envs on ``device``; sizes are
    positive ints. ``mean_dim``: the columns of the policy's parameters (a categorical policy's
    logits; default ``action_dim``, a Gaussian's means)."""
    mean_dim = action_dim if mean_dim is None else mean_dim
    for name, value in (("steps", steps), ("envs", envs), ("obs_dim", obs_dim), ("action_dim", action_dim)):
        _positive(name, value)
    _positive("mean_dim", mean_dim)
    rows = steps * envs
    log_prob, value, next_value, reward = (zeros(device, (steps, envs), dtype) for _ in range(4))
    return Rollout(
        obs=zeros(device, (rows, obs_dim), dtype),
        action=zeros(device, (rows, action_dim), dtype),
        mean=zeros(device, (rows, mean_dim), dtype),
        log_prob=log_prob,
        value=value,
        next_value=next_value,
        reward=reward,
        terminated=zeros(device, (steps, envs), np.bool_),
        truncated=zeros(device, (steps, envs), np.bool_),
        advantage=zeros(device, (steps, envs), dtype),
        returns=zeros(device, (steps, envs), dtype),
    )


@dataclass
class Minibatch:
    """The fields of a PPO minibatch (:func:`minibatch` builds them as a TensorDict, batch [B])."""

    obs: Array  # (B, O)
    action: Array  # (B, A)
    mean: Array  # (B, M): Gaussian means, or categorical logits
    log_prob: Array  # (B,)
    advantage: Array  # (B,)
    returns: Array  # (B, 1): the critic's regression target


def minibatch(device, rows, obs_dim, action_dim, dtype=np.float32, mean_dim=None) -> TensorDict:
    """A zero minibatch of ``rows`` rollout rows on ``device``: a TensorDict of batch size [rows]
    with the fields of :class:`Minibatch` (read as ``b["obs"]`` or ``b.obs``), which
    gather_minibatch fills."""
    _positive("rows", rows)
    fields = dict(
        obs=zeros(device, (rows, obs_dim), dtype),
        action=zeros(device, (rows, action_dim), dtype),
        mean=zeros(device, (rows, action_dim if mean_dim is None else mean_dim), dtype),
        log_prob=zeros(device, rows, dtype),
        advantage=zeros(device, rows, dtype),
        returns=zeros(device, (rows, 1), dtype),
    )
    return TensorDict(fields, [rows], device)
