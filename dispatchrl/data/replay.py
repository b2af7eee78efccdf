"""Replay buffer and episode log: preallocated per device, written only by kernels.

``replay_add`` / ``replay_sample`` / ``track_episodes`` (dispatchrl.kernels.offpolicy) operate on them,
so they can live inside a fused training step.
"""

import os
from dataclasses import dataclass, field

import numpy as np

from ..arrays import Array, to_numpy, view, zeros
from ..errors import ConfigError, DeviceError
from ..memory import map_host, space_of
from .tensordict import TensorDict

__all__ = ["EpisodeLog", "ReplayRing", "Transitions", "episode_log", "replay_buffer", "transitions"]


@dataclass
class Transitions:
    """Rows of (obs, action, reward, next_obs, terminated, truncated): the fields of a batch
    (:func:`transitions` builds one as a TensorDict), and of a replay ring's storage."""

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


def _transition_arrays(device, rows, obs_dim, action_dim, dtype) -> dict:
    return dict(
        obs=zeros(device, (rows, obs_dim), dtype),
        action=zeros(device, (rows, action_dim), dtype),
        reward=zeros(device, rows, dtype),
        next_obs=zeros(device, (rows, obs_dim), dtype),
        terminated=zeros(device, rows, np.bool_),
        truncated=zeros(device, rows, np.bool_),
    )


def transitions(device, rows, obs_dim, action_dim, dtype=np.float32) -> TensorDict:
    """``rows`` zero transitions on ``device``: a TensorDict of batch size [rows] with the fields
    of :class:`Transitions` (read as ``t["obs"]`` or ``t.obs``; generic functions taking a
    Transitions take it too): a sampled batch, or a Python-stepped env's current transition."""
    return TensorDict(_transition_arrays(device, rows, obs_dim, action_dim, dtype), [rows], device)


def replay_buffer(device, capacity, obs_dim, action_dim, dtype=np.float32):
    """A circular buffer of ``capacity`` transitions on ``device``."""
    for name, value in (("capacity", capacity), ("obs_dim", obs_dim), ("action_dim", action_dim)):
        if not isinstance(value, (int, np.integer)) or value < 1:
            raise ConfigError(f"replay_buffer: '{name}' must be a positive int, got {value!r}")
    rows = _transition_arrays(device, capacity, obs_dim, action_dim, dtype)
    return _ring(rows, zeros(device, 2, np.int64))


def _ring(rows, counters) -> ReplayRing:
    """A ring over transition ``rows`` and one int64 (2,) Array ``counters``, [size, position]
    (a storage's [length, cursor]: :class:`~dispatchrl.data.RingStorage` reads the pair as one)."""
    return ReplayRing(**rows, size=view(counters, 0, (1,)), position=view(counters, 1, (1,)))


#: the file of a memmapped ring's [size, position], as MemmapStorage's [length, cursor]
COUNTERS_FILE = "counters.npy"


def memmap_rows(path, max_size, spec) -> tuple[TensorDict, np.ndarray]:
    """Zero rows in numpy memmaps under folder ``path`` (created, or overwritten), ``spec``
    {key tuple: (shape, dtype)} as :meth:`TensorDict.empty_memmap`'s, and the memmapped int64
    (2,) [length, cursor] beside them: the one layout of MemmapStorage and memmapped rings."""
    files = TensorDict.empty_memmap(path, [max_size], spec)
    counters = np.lib.format.open_memmap(os.path.join(path, COUNTERS_FILE), mode="w+", dtype=np.int64, shape=(2,))
    return files, counters


def _on_device(device, host):
    """An Array on ``device`` over the host memory of ``host`` (no copy): host devices use it as
    is; CUDA maps it into the device's address space (pinned, zero-copy)."""
    try:
        return Array(device, map_host(space_of(device), host))
    except DeviceError as error:  # e.g. a file system the CUDA driver cannot pin
        raise DeviceError(f"memmap_path: {device!r} cannot map the memory-mapped replay files: {error}") from error


def memmap_replay_buffer(device, capacity, obs_dim, action_dim, path, dtype=np.float32) -> ReplayRing:
    """:func:`replay_buffer` in numpy memmaps under folder ``path`` (created, or overwritten:
    zero rows, as in memory), laid out as :class:`~dispatchrl.data.MemmapStorage`'s files, so
    ``MemmapStorage(capacity, path)`` or ``TensorDict.load_memmap(path)`` reopen what a run wrote.
    Kernels read and write the files' pages directly (CUDA through mapped host memory)."""
    replay_buffer(device, 1, obs_dim, action_dim, dtype)  # the argument checks
    if not isinstance(capacity, (int, np.integer)) or capacity < 1:
        raise ConfigError(f"replay_buffer: 'capacity' must be a positive int, got {capacity!r}")
    path = os.fspath(path)
    spec = {
        ("obs",): ((capacity, obs_dim), dtype),
        ("action",): ((capacity, action_dim), dtype),
        ("reward",): ((capacity,), dtype),
        ("next_obs",): ((capacity, obs_dim), dtype),
        ("terminated",): ((capacity,), np.bool_),
        ("truncated",): ((capacity,), np.bool_),
    }
    files, counters = memmap_rows(path, capacity, spec)
    rows = {name: _on_device(device, np.asarray(files[name])) for (name,) in spec}
    return _ring(rows, _on_device(device, np.asarray(counters)))  # mapped once: CUDA pins whole pages


@dataclass
class EpisodeLog:
    """Per-env running return/length, the count of finished episodes, and a ring of the returns,
    lengths and end steps of the latest ones: episode ``k`` (from the run's start) is in slot
    ``k % capacity``. The driver copies the new ones to the host at every chunk boundary, so the
    ring needs to hold one chunk's episodes only, and checkpoints leave it out (scratch)."""

    # the ring: dispatchrl.checkpoint.SCRATCH fields (spelled out: data comes before checkpoint)

    running_return: Array  # (N,) float64
    running_length: Array  # (N,) int64
    returns: Array = field(metadata={"scratch": True})  # (capacity,) float64
    lengths: Array = field(metadata={"scratch": True})  # (capacity,) int64
    end_steps: Array = field(metadata={"scratch": True})  # (capacity,) int64: per-env step at which each episode ended
    count: Array  # (1,) int64: episodes finished since the run's start

    def since(self, first: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Host copies of (end_steps, returns, lengths) of the episodes numbered ``first`` to
        count - 1, copying only those; raises RuntimeError if the ring no longer holds them all."""
        count, capacity = int(to_numpy(self.count)[0]), self.returns.shape[0]
        if count - first > capacity:
            raise RuntimeError(
                f"the episode ring of {capacity} episodes was read {count - first} episodes late: "
                "read it at least every capacity episodes"
            )
        if count <= first:
            return np.zeros(0, np.int64), np.zeros(0, np.float64), np.zeros(0, np.int64)
        start, n = first % capacity, count - first
        spans = [(start, min(n, capacity - start))]
        if n > spans[0][1]:  # wrapped: the rest from slot 0
            spans.append((0, n - spans[0][1]))
        arrays = (self.end_steps, self.returns, self.lengths)
        ends, returns, lengths = (np.concatenate([to_numpy(view(a, s, (k,))) for s, k in spans]) for a in arrays)
        return ends, returns, lengths

    def validate_checkpoint(self, values, context) -> None:
        """Counts are non-negative (checked for every integer leaf); a running episode is shorter
        than the env's time limit, when the caller knows the env (``context["env"]``)."""
        limit = getattr(context.get("env"), "max_episode_steps", None)
        if limit is not None:
            values.require("running_length", 0, limit - 1, "steps of the running episode, below the time limit")


def episode_log(device, num_envs, capacity):
    """An episode log for ``num_envs`` envs whose ring holds ``capacity`` finished episodes."""
    if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity < 1:
        raise ConfigError(f"episode_log: 'capacity' must be a positive int, got {capacity!r}")
    return EpisodeLog(
        running_return=zeros(device, num_envs, np.float64),
        running_length=zeros(device, num_envs, np.int64),
        returns=zeros(device, capacity, np.float64),
        lengths=zeros(device, capacity, np.int64),
        end_steps=zeros(device, capacity, np.int64),
        count=zeros(device, 1, np.int64),
    )
