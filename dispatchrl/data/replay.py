"""Replay buffer and episode log: preallocated per device, written only by kernels.

``replay_add`` / ``replay_sample`` / ``track_episodes`` (dispatchrl.kernels.offpolicy) operate on them,
so they can live inside a fused training step.
"""

from dataclasses import dataclass

import numpy as np

from ..arrays import Array, to_numpy, zeros
from ..errors import ConfigError

__all__ = ["EpisodeLog", "ReplayRing", "Transitions", "episode_log", "replay_buffer", "transitions"]


@dataclass
class Transitions:
    """Rows of (obs, action, reward, next_obs, terminated, truncated): a batch, or a buffer's storage."""

    obs: Array  # (rows, O)
    action: Array  # (rows, A)
    reward: Array  # (rows,)
    next_obs: Array  # (rows, O)
    terminated: Array  # (rows,) bool
    truncated: Array  # (rows,) bool


@dataclass
class ReplayRing(Transitions):
    """The preallocated device ring the fused TD3/SAC steps write with replay_add and read with
    replay_sample (dispatchrl.data.ReplayBuffer is the composable host-side buffer)."""

    position: Array  # int64 (1,): next row to write
    size: Array  # int64 (1,): rows filled so far

    @property
    def capacity(self) -> int:
        return self.obs.shape[0]

    def validate_checkpoint(self, values, context) -> None:
        """Rows filled ≤ capacity; the next row to write is a row, and is ``size`` until the
        buffer has wrapped (replay_add writes rows in order)."""
        capacity = self.capacity
        size = values.require("size", 0, capacity, "rows filled, at most the capacity")
        position = values.require("position", 0, capacity - 1, "the next row to write")
        if size < capacity and position != size:
            values.refuse("position", f"= {position} must equal size ({size}) until the buffer has wrapped")


def transitions(device, rows, obs_dim, action_dim, dtype=np.float32):
    return Transitions(
        obs=zeros(device, (rows, obs_dim), dtype),
        action=zeros(device, (rows, action_dim), dtype),
        reward=zeros(device, rows, dtype),
        next_obs=zeros(device, (rows, obs_dim), dtype),
        terminated=zeros(device, rows, np.bool_),
        truncated=zeros(device, rows, np.bool_),
    )


def replay_buffer(device, capacity, obs_dim, action_dim, dtype=np.float32):
    """A circular buffer of ``capacity`` transitions on ``device``."""
    for name, value in (("capacity", capacity), ("obs_dim", obs_dim), ("action_dim", action_dim)):
        if not isinstance(value, (int, np.integer)) or value < 1:
            raise ConfigError(f"replay_buffer: '{name}' must be a positive int, got {value!r}")
    rows = transitions(device, capacity, obs_dim, action_dim, dtype)
    return ReplayRing(**vars(rows), position=zeros(device, 1, np.int64), size=zeros(device, 1, np.int64))


@dataclass
class EpisodeLog:
    """Per-env running return/length and the returns, lengths and end steps of finished episodes."""

    running_return: Array  # (N,) float64
    running_length: Array  # (N,) int64
    returns: Array  # (capacity,) float64
    lengths: Array  # (capacity,) int64
    end_steps: Array  # (capacity,) int64: global step at which each episode ended
    count: Array  # (1,) int64: episodes finished (may exceed capacity; later ones are dropped)

    def finished(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Host copies of (end_steps, returns, lengths) of the logged episodes."""
        n = min(int(to_numpy(self.count)[0]), self.returns.shape[0])
        return to_numpy(self.end_steps)[:n], to_numpy(self.returns)[:n], to_numpy(self.lengths)[:n]

    def validate_checkpoint(self, values, context) -> None:
        """Counts are non-negative (checked for every integer leaf); a running episode is shorter
        than the env's time limit, when the caller knows the env (``context["env"]``)."""
        limit = getattr(context.get("env"), "max_episode_steps", None)
        if limit is not None:
            values.require("running_length", 0, limit - 1, "steps of the running episode, below the time limit")


def episode_log(device, num_envs, capacity):
    return EpisodeLog(
        running_return=zeros(device, num_envs, np.float64),
        running_length=zeros(device, num_envs, np.int64),
        returns=zeros(device, capacity, np.float64),
        lengths=zeros(device, capacity, np.int64),
        end_steps=zeros(device, capacity, np.int64),
        count=zeros(device, 1, np.int64),
    )
