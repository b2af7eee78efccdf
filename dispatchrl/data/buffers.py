"""A composable replay buffer over TensorDicts: storage + sampler + writer + write-time transform.

``ReplayBuffer(storage, sampler=UniformSampler(), writer=RoundRobinWriter(), batch_size=B,
transform=None)`` follows TorchRL's split (seed 003): the storage holds a TensorDict of
``max_size`` rows, allocated lazily from the first batch written; the writer picks the rows a batch
goes to; the sampler picks the rows a sample reads. Checkpoints are npz arrays plus json, never
pickle.

One design for both sides: the fused TD3/SAC/DQN steps' preallocated ring
(:mod:`dispatchrl.data.replay`) is this design's storage in device memory, its kernels' uniform
and prioritized draws are the samplers' (the same counter stream and trees), and
:class:`RingStorage` opens a ring as a storage of this buffer, in place.
"""

import json
import os
from collections import deque

import numpy as np

from ..arrays import to_numpy
from ..devices import CPU
from ..errors import ConfigError, DeviceError, EmptyBufferError, MissingKeyError, ShapeError
from ..kernels.random.api import rng
from ..kernels.replay.api import EMPTY, tree_leaves
from ..kernels.replay.cpu import (
    AT_HEADER,
    checked_priority_update_at,
    prioritized_rows_at,
    priority_mark_new_kernel,
    priority_sample_kernel,
    priority_update_kernel,
    set_leaf,
    uniform_index_kernel,
    uniform_rows_at,
)
from ..memory import host_view, space_of
from .replay import COUNTERS_FILE, ReplayRing, memmap_rows
from .tensordict import META_FILE, TensorDict, flat_key, host_leaf, stack

__all__ = [
    "DeviceStorage",
    "MemmapStorage",
    "NStep",
    "PreparedSample",
    "PrioritizedSampler",
    "ReplayBuffer",
    "RoundRobinWriter",
    "UniformSampler",
    "WithoutReplacementSampler",
]


def _positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ConfigError(f"'{name}' must be a positive int, got {value!r}")
    return int(value)


def _rng_state(rng):
    return rng.bit_generator.state


def _set_rng_state(rng, state):
    rng.bit_generator.state = state


# ---------------------------------------------------------------------------------------------
# storages
# ---------------------------------------------------------------------------------------------
class _Storage:
    """Rows [0, max_size) of a TensorDict, the number filled (``len``) and the next row to write."""

    def __init__(self, max_size):
        self.max_size = _positive_int("max_size", max_size)
        self.data = None  # TensorDict of batch (max_size,)
        self._counters = np.zeros(2, np.int64)  # [length, cursor]

    def _allocate(self, td) -> None:
        """Create the storage's arrays from the first batch written (each storage kind has its own)."""
        raise NotImplementedError

    def __len__(self) -> int:
        return int(self._counters[0])

    @property
    def cursor(self) -> int:
        return int(self._counters[1])

    def _advance(self, count) -> None:
        self._counters[0] = min(self.max_size, int(self._counters[0]) + count)
        self._counters[1] = (int(self._counters[1]) + count) % self.max_size

    def _spec(self, td):
        spec = {}
        for key in td.keys(include_nested=True, leaves_only=True):
            leaf = host_leaf(td[key])
            spec[flat_key(key)] = ((self.max_size,) + tuple(leaf.shape[1:]), leaf.dtype)
        return spec

    def _check(self, td):
        """Same leaf keys and per-row shapes as the storage; refused before anything is written."""
        have = {flat_key(k) for k in self.data.keys(include_nested=True, leaves_only=True)}
        got = {flat_key(k) for k in td.keys(include_nested=True, leaves_only=True)}
        for key in sorted(have ^ got):
            where = "the batch lacks" if key in have else "the storage has no"
            raise MissingKeyError(f"replay storage: {where} key {'.'.join(key)!r}")
        for key in have:
            row, new = self.data[key].shape[1:], host_leaf(td[key]).shape[1:]
            if tuple(row) != tuple(new):
                raise ShapeError(
                    f"replay storage: entry {'.'.join(key)!r} has rows of shape {tuple(new)}, "
                    f"the storage holds {tuple(row)}"
                )

    def set(self, indices, td) -> None:
        if self.data is None:
            self._allocate(td)
        self._check(td)
        self.data[indices] = td

    def get(self, indices) -> TensorDict:
        if self.data is None:
            raise EmptyBufferError("replay storage: nothing has been written yet")
        if self.data.device is None and type(indices) is np.ndarray and indices.ndim == 1:
            return self.data._take_rows(indices, len(indices))
        return self.data[indices]

    def state_dict(self) -> dict:
        out = {"counters": self._counters.copy()}
        if self.data is not None:
            for key, leaf in self.data.flatten_keys("/").items():
                out["data/" + key] = np.array(host_leaf(leaf))
        return out

    def load_state_dict(self, state) -> None:
        counters = np.asarray(state["counters"], np.int64)
        if counters.shape != (2,) or not (0 <= counters[0] <= self.max_size and 0 <= counters[1] < self.max_size):
            raise ShapeError(f"replay storage: counters {counters.tolist()} do not fit max_size {self.max_size}")
        entries = {k[len("data/") :]: v for k, v in state.items() if k.startswith("data/")}
        if entries:
            td = TensorDict(entries, [self.max_size]).unflatten_keys("/")
            if self.data is None:
                self._allocate(td)
            self.set(slice(None), td)
        self._counters[:] = counters


class DeviceStorage(_Storage):
    """Preallocated rows on ``device`` (None: host numpy), allocated at the first write."""

    def __init__(self, max_size, device=None):
        super().__init__(max_size)
        self.device = device

    def _allocate(self, td) -> None:
        self.data = TensorDict({}, [self.max_size], self.device)
        for key, (shape, dtype) in self._spec(td).items():
            self.data.set(key, np.zeros(shape, dtype))


class MemmapStorage(_Storage):
    """Rows in numpy memmaps under folder ``path``, created at the first write from the first
    batch's keys, shapes and dtypes. The length and write cursor live in a memmapped file next
    to them, so reopening the same path (in any process) sees the same content, length and cursor."""

    COUNTERS = COUNTERS_FILE

    def __init__(self, max_size, path):
        super().__init__(max_size)
        self.path = os.fspath(path)
        if os.path.exists(os.path.join(self.path, META_FILE)):
            self.data = TensorDict.load_memmap(self.path)
            if self.data.batch_size != (self.max_size,):
                raise ShapeError(
                    f"MemmapStorage: {self.path!r} holds {self.data.batch_size} rows, max_size is {self.max_size}"
                )
            self._counters = self._open_counters()

    def _open_counters(self) -> np.ndarray:
        """The folder's [length, cursor], mapped, after checking they fit ``max_size``: the sample
        and write kernels index the rows with them unchecked (a length past the rows reads
        outside the mapping)."""
        where = os.path.join(self.path, self.COUNTERS)
        try:
            counters = np.load(where, mmap_mode="r+", allow_pickle=False)
        except (OSError, ValueError) as e:
            raise ShapeError(f"MemmapStorage: {where} is not a readable counters file ({e})") from None
        if counters.dtype != np.int64 or counters.shape != (2,):
            raise ShapeError(f"MemmapStorage: {where} holds {counters.dtype} {counters.shape}, expected int64 (2,)")
        length, cursor = int(counters[0]), int(counters[1])
        if not (0 <= length <= self.max_size and 0 <= cursor < self.max_size):
            raise ShapeError(
                f"MemmapStorage: {where} holds length {length} and cursor {cursor}, which do not fit "
                f"max_size {self.max_size} (expected 0 <= length <= {self.max_size}, 0 <= cursor < {self.max_size})"
            )
        return counters

    def _allocate(self, td) -> None:
        self.data, counters = memmap_rows(self.path, self.max_size, self._spec(td))
        counters[:] = self._counters
        self._counters = counters

    def flush(self) -> None:
        for leaf in self.data.values(True, True) if self.data is not None else []:
            if isinstance(leaf, np.memmap):
                leaf.flush()
        if isinstance(self._counters, np.memmap):
            self._counters.flush()


class RingStorage(_Storage):
    """The replay ring of a fused TD3/SAC/DQN step (:class:`~dispatchrl.data.ReplayRing`, e.g.
    ``model.state.replay``) as a storage, in place: rows ``extend`` writes are rows the step
    samples, and ``sample`` reads what the step stored; the ring's [size, position] are the
    storage's [length, cursor]. Host memory only (Generic, CPU and C devices; memmapped rings).
    ``writable=False`` refuses writes: a training run's ring, whose size and position follow the
    run's step count (checkpoints check them)."""

    def __init__(self, ring, writable=True):
        if not isinstance(ring, ReplayRing):
            raise ConfigError(f"RingStorage: 'ring' must be a dispatchrl.data.ReplayRing, got {type(ring).__name__}")
        super().__init__(ring.capacity)
        host = {}
        for name, array in vars(ring).items():
            host[name] = host_view(space_of(array.device), array.data)
            if host[name] is None:
                raise DeviceError(
                    f"RingStorage: 'ring' is in {array.device!r}'s memory, which host code cannot address; "
                    "copy the rows out with dispatchrl.to_numpy"
                )
        size, position = host.pop("size"), host.pop("position")
        if _address(position) != _address(size) + size.itemsize:
            raise ConfigError(
                "RingStorage: the ring's size and position are not one [size, position] pair "
                "(make rings with dispatchrl.data.replay_buffer or memmap_replay_buffer)"
            )
        self._counters = np.lib.stride_tricks.as_strided(size, (2,), size.strides)
        self.data = TensorDict(host, [self.max_size])
        self.writable = bool(writable)

    def set(self, indices, td) -> None:
        if not self.writable:
            raise ConfigError(
                "RingStorage: this ring is read-only (a training run's: its size and position follow the "
                "run's steps); write to a ReplayBuffer of your own"
            )
        super().set(indices, td)

    def _allocate(self, td) -> None:
        raise AssertionError("a RingStorage's rows are the ring's")


# ---------------------------------------------------------------------------------------------
# writer
# ---------------------------------------------------------------------------------------------
class RoundRobinWriter:
    """Rows in order from the storage's cursor, wrapping around (the oldest are overwritten)."""

    def indices(self, storage, count) -> np.ndarray:
        if count > storage.max_size:
            raise ShapeError(f"replay buffer: a batch of {count} rows does not fit max_size {storage.max_size}")
        return (storage.cursor + np.arange(count)) % storage.max_size

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state) -> None:
        pass


# ---------------------------------------------------------------------------------------------
# samplers
# ---------------------------------------------------------------------------------------------
def _counter_stream(seed) -> np.ndarray:
    """The counter stream of the replay kernels (the fused steps' draws) for ``seed``; None: a
    fresh seed from the OS."""
    if seed is None:
        seed = int(np.random.SeedSequence().generate_state(1, np.uint64)[0] >> np.uint64(1))
    return to_numpy(rng(CPU(), seed))


class UniformSampler:
    """Rows uniformly at random, with replacement, from the counter stream ``rng(seed)``: the
    rows replay_sample / uniform_index draw from the same stream."""

    def __init__(self, seed=None):
        self.rng = _counter_stream(seed)
        self._size = np.zeros(1, np.int64)

    def sample(self, length, batch_size):
        index = np.empty(batch_size, np.int64)
        self._size[0] = length
        uniform_index_kernel(self.rng, self._size, index)
        return index, {}

    def written(self, indices, capacity) -> None:
        pass

    def state_dict(self) -> dict:
        return {"rng": self.rng.copy()}

    def load_state_dict(self, state) -> None:
        if np.shape(state["rng"]) != (2,):
            raise ShapeError(f"UniformSampler: 'rng' must be a counter stream [key, counter], got {state['rng']!r}")
        self.rng[:] = np.asarray(state["rng"], np.uint64)  # in place: a PreparedSample holds it


class WithoutReplacementSampler:
    """Every stored row once per pass, in a fresh seeded permutation each pass; the last batch of
    a pass is shorter when ``batch_size`` does not divide the length (unless ``drop_last``). A pass
    restarts when the number of stored rows changed."""

    def __init__(self, seed=None, drop_last=False):
        self.rng = np.random.default_rng(seed)
        self.drop_last = bool(drop_last)
        self.order = np.zeros(0, np.int64)
        self.position = 0

    def sample(self, length, batch_size):
        if batch_size > length:
            raise ShapeError(f"WithoutReplacementSampler: batch_size {batch_size} exceeds the {length} stored rows")
        left = len(self.order) - self.position
        if len(self.order) != length or left <= 0 or (self.drop_last and left < batch_size):
            self.order = self.rng.permutation(length)
            self.position = 0
        index = self.order[self.position : self.position + batch_size]
        self.position += len(index)
        return index, {}

    def written(self, indices, capacity) -> None:
        pass

    def state_dict(self) -> dict:
        return {"rng": _rng_state(self.rng), "order": self.order.copy(), "position": self.position}

    def load_state_dict(self, state) -> None:
        _set_rng_state(self.rng, state["rng"])
        self.order = np.asarray(state["order"], np.int64)
        self.position = int(state["position"])


class PrioritizedSampler:
    """Proportional prioritized replay (Schaul et al. 2016) on a sum tree and a min tree.

    Row i is drawn with probability ``v_i / sum(v)`` where ``v_i = (priority_i + eps) ** alpha``;
    new rows get ``(max priority seen + eps) ** alpha`` (max starts at 1.0). Samples carry
    ``weight = (N P(i)) ** -beta / max_j (N P(j)) ** -beta`` over all N stored rows. The trees
    and the draws are the CPU kernels of :mod:`dispatchrl.kernels.replay` (the same numbers as
    the fused steps on every device), called directly after the checks here.
    """

    def __init__(self, max_size, alpha, beta, eps=1e-8, seed=None):
        self.max_size = _positive_int("max_size", max_size)
        if not np.isfinite(alpha) or alpha < 0:
            raise ConfigError(f"PrioritizedSampler: 'alpha' must be >= 0, got {alpha!r}")
        if not np.isfinite(eps) or eps < 0:
            raise ConfigError(f"PrioritizedSampler: 'eps' must be >= 0, got {eps!r}")
        self.alpha, self.eps = float(alpha), float(eps)
        self._beta_array = np.zeros(1, np.float64)  # written in place: a PreparedSample holds it
        self.beta = beta
        self.leaves = tree_leaves(self.max_size)
        self.sum_tree = np.zeros(2 * self.leaves, np.float64)
        self.min_tree = np.full(2 * self.leaves, EMPTY, np.float64)
        self._max_priority = np.ones(1, np.float64)
        self.rng = _counter_stream(seed)
        self._size = np.zeros(1, np.int64)

    @property
    def max_priority(self) -> float:
        return float(self._max_priority[0])

    @property
    def beta(self) -> float:
        return self._beta

    @beta.setter
    def beta(self, value) -> None:
        if not (isinstance(value, (int, float, np.floating)) and 0.0 <= value <= 1.0):
            raise ConfigError(f"PrioritizedSampler: 'beta' must be in [0, 1], got {value!r}")
        self._beta = float(value)
        self._beta_array[0] = self._beta

    def written(self, indices, capacity) -> None:
        indices = np.asarray(indices, np.int64)
        start = indices[:1].copy()
        if np.array_equal(indices, (start[0] + np.arange(len(indices))) % capacity):  # a ring write
            priority_mark_new_kernel(
                self.sum_tree, self.min_tree, self._max_priority, start, len(indices), capacity, self.alpha, self.eps
            )
            return
        value = (self._max_priority[0] + self.eps) ** self.alpha
        for row in indices:
            set_leaf(self.sum_tree, self.min_tree, row, value)

    def update_priority(self, indices, priority, length) -> None:
        indices = np.ascontiguousarray(indices, np.int64).reshape(-1)
        priority = np.ascontiguousarray(np.broadcast_to(np.asarray(priority, np.float64), indices.shape))
        if indices.size and (indices.min() < 0 or indices.max() >= length):
            raise ShapeError(
                f"update_priority: indices must be stored rows in [0, {length}), got [{indices.min()}, {indices.max()}]"
            )
        if not np.all(np.isfinite(priority)) or np.any(priority < 0):
            raise ConfigError("update_priority: priorities must be finite and >= 0")
        priority_update_kernel(
            self.sum_tree, self.min_tree, self._max_priority, indices, priority, self.alpha, self.eps
        )

    def sample(self, length, batch_size):
        index = np.empty(batch_size, np.int64)
        weight = np.empty(batch_size, np.float32)
        self._size[0] = length
        priority_sample_kernel(self.rng, self.sum_tree, self.min_tree, self._size, self._beta_array, index, weight)
        return index, {"weight": weight}

    def state_dict(self) -> dict:
        return {
            "rng": self.rng.copy(),
            "sum_tree": self.sum_tree.copy(),
            "min_tree": self.min_tree.copy(),
            "max_priority": self.max_priority,
            "beta": self._beta,
        }

    def load_state_dict(self, state) -> None:
        for name in ("sum_tree", "min_tree"):
            if np.shape(state[name]) != (2 * self.leaves,):
                raise ShapeError(
                    f"PrioritizedSampler: {name} has shape {np.shape(state[name])}, expected {(2 * self.leaves,)}"
                )
        self.rng[:] = np.asarray(state["rng"], np.uint64)
        self.sum_tree[:] = state["sum_tree"]
        self.min_tree[:] = state["min_tree"]
        self._max_priority[0] = float(state["max_priority"])
        self.beta = float(state["beta"])


# ---------------------------------------------------------------------------------------------
# n-step transform
# ---------------------------------------------------------------------------------------------
class NStep:
    """n-step returns at write time, one window per environment.

    Each write is one step of N envs (batch ``(N,)``, or ``()`` for one env). A transition leaves
    the window when n newer steps exist, or when its episode ends: ``reward`` becomes
    ``sum_j gamma**j r_{t+j}`` over the k <= n steps up to the end of the window, ``next_keys``
    come from the window's last step, ``terminated``/``truncated`` are that step's (so a
    termination inside the window cuts the return and stops bootstrapping, a truncation cuts it and
    bootstraps from the last observation), and ``steps`` = k (bootstrap with ``gamma ** steps``).
    """

    def __init__(
        self,
        n,
        gamma,
        reward_key="reward",
        next_keys=("next_obs",),
        terminated_key="terminated",
        truncated_key="truncated",
        steps_key="steps",
    ):
        self.n = _positive_int("n", n)
        if not 0.0 <= gamma <= 1.0:
            raise ConfigError(f"NStep: 'gamma' must be in [0, 1], got {gamma!r}")
        self.gamma = float(gamma)
        self.reward_key, self.next_keys = reward_key, tuple(next_keys)
        self.terminated_key, self.truncated_key, self.steps_key = terminated_key, truncated_key, steps_key
        self.windows = []  # per env: deque of flat {key: row}

    def _emit(self, rows):
        first, last = rows[0], rows[-1]
        out = dict(first)
        reward = np.zeros_like(np.asarray(first[self.reward_key], np.float64))
        for j, row in enumerate(rows):
            reward = reward + self.gamma**j * np.asarray(row[self.reward_key], np.float64)
        out[self.reward_key] = np.asarray(reward, np.asarray(first[self.reward_key]).dtype)
        for key in self.next_keys + (self.terminated_key, self.truncated_key):
            out[key] = last[key]
        out[self.steps_key] = np.int64(len(rows))
        return out

    def __call__(self, td):
        if td.batch_dims == 0:
            td = stack([td])
        if td.batch_dims != 1:
            raise ShapeError(f"NStep: expects one step of N envs (batch (N,)), got batch {td.batch_size}")
        for key in (self.reward_key, self.terminated_key, self.truncated_key) + self.next_keys:
            if key not in td:
                raise MissingKeyError(f"NStep: the batch has no key {key!r}")
        num_envs = td.batch_size[0]
        if not self.windows:
            self.windows = [deque() for _ in range(num_envs)]
        if len(self.windows) != num_envs:
            raise ShapeError(f"NStep: {num_envs} envs in this batch, {len(self.windows)} before")
        flat = {k: host_leaf(v) for k, v in td.flatten_keys("/").items()}
        emitted = []
        for env, window in enumerate(self.windows):
            row = {k: np.array(v[env]) for k, v in flat.items()}
            window.append(row)
            if bool(row[self.terminated_key]) or bool(row[self.truncated_key]):
                while window:
                    emitted.append(self._emit(list(window)))
                    window.popleft()
            elif len(window) == self.n:
                emitted.append(self._emit(list(window)))
                window.popleft()
        if not emitted:
            return None
        return TensorDict({k: np.stack([e[k] for e in emitted]) for k in emitted[0]}, [len(emitted)]).unflatten_keys(
            "/"
        )

    def state_dict(self) -> dict:
        out = {
            "num_envs": len(self.windows),
            "env": np.array([e for e, w in enumerate(self.windows) for _ in w], np.int64),
        }
        rows = [row for w in self.windows for row in w]
        for key in rows[0] if rows else {}:
            out["rows/" + key] = np.stack([row[key] for row in rows])
        return out

    def load_state_dict(self, state) -> None:
        self.windows = [deque() for _ in range(int(state["num_envs"]))]
        keys = [k[len("rows/") :] for k in state if k.startswith("rows/")]
        for i, env in enumerate(np.asarray(state["env"])):
            self.windows[int(env)].append({k: np.array(state["rows/" + k][i]) for k in keys})


# ---------------------------------------------------------------------------------------------
# the buffer
# ---------------------------------------------------------------------------------------------
def _as_tensordict(data, what):
    if isinstance(data, TensorDict):
        return data
    if isinstance(data, dict):
        first = next(iter(data.values()), None)
        if first is None:
            raise ShapeError(f"{what}: empty dict")
        if isinstance(first, dict):
            raise ShapeError(f"{what}: pass a TensorDict for nested data")
        return TensorDict(data, np.shape(first)[:1])
    raise ShapeError(f"{what}: expected a TensorDict or a dict of arrays, got {type(data).__name__}")


class ReplayBuffer:
    """``extend``/``add`` rows, ``sample`` a TensorDict with an ``"index"`` entry (and ``"weight"``
    for prioritized samplers), ``update_priority``; ``state_dict`` for checkpoints."""

    def __init__(self, storage, sampler=None, writer=None, batch_size=None, transform=None):
        if not isinstance(storage, _Storage):
            raise ConfigError(
                f"ReplayBuffer: 'storage' must be a DeviceStorage, MemmapStorage or RingStorage, got {storage!r}"
            )
        self.storage = storage
        self.sampler = sampler if sampler is not None else UniformSampler()
        self.writer = writer if writer is not None else RoundRobinWriter()
        self.batch_size = None if batch_size is None else _positive_int("batch_size", batch_size)
        self.transform = transform
        if isinstance(self.sampler, PrioritizedSampler) and self.sampler.max_size < storage.max_size:
            raise ConfigError(
                f"ReplayBuffer: PrioritizedSampler max_size {self.sampler.max_size} is below "
                f"the storage's {storage.max_size}"
            )

    def __len__(self) -> int:
        return len(self.storage)

    def extend(self, data) -> np.ndarray:
        """Write the rows of ``data`` (batch ``(rows,)``); returns the rows written to."""
        td = _as_tensordict(data, "ReplayBuffer.extend")
        if self.transform is not None:
            td = self.transform(td)
            if td is None:
                return np.zeros(0, np.int64)
        if td.batch_dims != 1:
            raise ShapeError(f"ReplayBuffer.extend: expects a batch of rows (batch (rows,)), got {td.batch_size}")
        count = td.batch_size[0]
        if count == 0:
            return np.zeros(0, np.int64)
        index = self.writer.indices(self.storage, count)
        self.storage.set(index, td)
        self.storage._advance(count)
        self.sampler.written(index, self.storage.max_size)
        return index

    def add(self, data) -> np.ndarray:
        """Write one row (batch ``()``)."""
        td = _as_tensordict(data, "ReplayBuffer.add") if not isinstance(data, dict) else TensorDict(data, [])
        if self.transform is not None:
            return self.extend(td)
        return self.extend(stack([td]))

    def sample(self, batch_size=None) -> TensorDict:
        batch_size = self.batch_size if batch_size is None else _positive_int("batch_size", batch_size)
        if batch_size is None:
            raise ConfigError("ReplayBuffer.sample: no batch_size given here or at construction")
        length = len(self.storage)
        if length == 0:
            raise EmptyBufferError("ReplayBuffer.sample: the buffer is empty")
        index, info = self.sampler.sample(length, batch_size)
        out = self.storage.get(index)
        out._entries["index"] = index
        for key, value in info.items():
            out._entries[key] = value
        return out

    def prepare(self, batch_size=None) -> "PreparedSample":
        """A bound sampler for the hot loop: checks done once here, then each call draws and
        gathers in one compiled call into preallocated rows (see :class:`PreparedSample`)."""
        batch_size = self.batch_size if batch_size is None else _positive_int("batch_size", batch_size)
        if batch_size is None:
            raise ConfigError("ReplayBuffer.prepare: no batch_size given here or at construction")
        return PreparedSample(self, batch_size)

    def update_priority(self, index, priority) -> None:
        if not isinstance(self.sampler, PrioritizedSampler):
            raise ConfigError("ReplayBuffer.update_priority: the sampler is not a PrioritizedSampler")
        self.sampler.update_priority(index, priority, len(self.storage))

    def state_dict(self) -> dict:
        """Flat ``{name: ndarray}`` (np.savez-able, loads with allow_pickle=False); json scalars
        and rng states live in the ``"meta"`` string."""
        arrays, meta = {}, {}
        parts = {"storage": self.storage, "sampler": self.sampler, "writer": self.writer}
        if self.transform is not None:
            parts["transform"] = self.transform
        for part, obj in parts.items():
            for key, value in obj.state_dict().items():
                if isinstance(value, np.ndarray):
                    arrays[f"{part}/{key}"] = value
                else:
                    meta[f"{part}/{key}"] = value
        arrays["meta"] = np.array(json.dumps(meta))
        return arrays

    def load_state_dict(self, state) -> None:
        meta = json.loads(str(np.asarray(state["meta"])))
        parts = {"storage": self.storage, "sampler": self.sampler, "writer": self.writer}
        if self.transform is not None:
            parts["transform"] = self.transform
        for part, obj in parts.items():
            sub = {k[len(part) + 1 :]: v for k, v in state.items() if k.startswith(part + "/")}
            sub.update({k[len(part) + 1 :]: v for k, v in meta.items() if k.startswith(part + "/")})
            obj.load_state_dict(sub)

    def save(self, path) -> None:
        np.savez(path, **self.state_dict())

    def load(self, path) -> None:
        with np.load(path, allow_pickle=False) as f:
            self.load_state_dict({k: f[k] for k in f.files})


def _address(array) -> int:
    """Address of ``array``'s first element."""
    return int(array.__array_interface__["data"][0])


def _entry_point(dispatcher, *args):
    """The compiled entry of ``dispatcher`` for these arguments' types: calling it skips Numba's
    per-call type dispatch (the arguments' types are fixed once checked)."""
    from numba import typeof

    return dispatcher.compile(tuple(typeof(a) for a in args))


class PreparedSample:
    """``rb.prepare(batch_size)()``: ``rb.sample(batch_size)`` with the checks done once.

    Made from a buffer with rows stored on the host (``DeviceStorage()`` or ``MemmapStorage``) and
    a uniform or prioritized sampler. Each call draws the same rows as ``rb.sample`` would (the
    same stream) and copies them, with one compiled call, into preallocated arrays; it returns
    the same TensorDict every time, overwritten by the next call (copy it to keep it), as
    TorchRL's prefetched batches are.

    Per call, Python hands the compiled function one int64 array holding the addresses of every
    array it reads and writes (unboxing one argument, not one per array: a third of the call on a
    quiet machine). Those arrays are the buffer's own, which writes, checkpoint loads and β
    changes update in place, and this object keeps them alive; nothing is looked up or checked in
    Python per call."""

    def __init__(self, buffer, batch_size):
        storage, sampler = buffer.storage, buffer.sampler
        if storage.data is None:
            raise EmptyBufferError("ReplayBuffer.prepare: nothing has been written yet (the rows' layout is unknown)")
        if storage.data.device is not None:
            raise ConfigError(
                f"ReplayBuffer.prepare: the storage's rows are on {storage.data.device!r}; "
                "it needs host rows (DeviceStorage() or MemmapStorage)"
            )
        if not isinstance(sampler, (UniformSampler, PrioritizedSampler)):
            raise ConfigError(
                f"ReplayBuffer.prepare: needs a UniformSampler or PrioritizedSampler, got {type(sampler).__name__}"
            )
        self.buffer, self.batch_size = buffer, int(batch_size)
        self._sampler = sampler
        self.index = np.zeros(self.batch_size, np.int64)
        self.weight = np.zeros(self.batch_size, np.float32)
        counters = storage._counters  # [length, cursor], updated in place by every write
        header = [sampler.rng, counters, self.index, self.batch_size]
        if isinstance(sampler, PrioritizedSampler):
            trees = (sampler.sum_tree, sampler.min_tree)
            self._mass = np.zeros(self.batch_size)  # the descents' masses, then the update's nodes (int64)
            header += [*trees, len(sampler.sum_tree), sampler._beta_array, self.weight, self._mass]
            header += [sampler._max_priority]
        header += [0] * (AT_HEADER - len(header))
        entries, leaves, self._arrays = {}, [], [a for a in header if isinstance(a, np.ndarray)]
        for key in storage.data.keys(include_nested=True, leaves_only=True):
            leaf = np.asarray(host_leaf(storage.data[key]))
            out = np.zeros((self.batch_size,) + leaf.shape[1:], leaf.dtype)
            entries["/".join(flat_key(key))] = out
            if out.nbytes:
                source = np.ascontiguousarray(leaf.reshape(leaf.shape[0], -1)).view(np.uint8)
                if not np.may_share_memory(source, leaf):
                    raise ConfigError(
                        f"ReplayBuffer.prepare: storage entry {'.'.join(flat_key(key))!r} is not contiguous"
                    )
                width = source.shape[1]
                aligned = width % 8 == 0 and _address(source) % 8 == 0 and _address(out) % 8 == 0
                leaves += [source, out, source.shape[0], width, width // 8 if aligned else 0]
                self._arrays += [source, out]
        for array in self._arrays:
            if not (array.flags.c_contiguous and array.flags.aligned):
                raise ConfigError("ReplayBuffer.prepare: the buffer's arrays must be contiguous and aligned")
        entries["index"] = self.index
        if isinstance(sampler, PrioritizedSampler):
            entries["weight"] = self.weight
        self._at = np.array([_address(a) if isinstance(a, np.ndarray) else a for a in header + leaves], np.int64)
        self._run = _entry_point(
            prioritized_rows_at if isinstance(sampler, PrioritizedSampler) else uniform_rows_at, self._at
        )
        if isinstance(sampler, PrioritizedSampler):
            self._update = _entry_point(
                checked_priority_update_at, self._at, np.zeros(self.batch_size), sampler.alpha, sampler.eps
            )
        self.out = TensorDict(entries, [self.batch_size]).unflatten_keys("/")

    def __call__(self) -> TensorDict:
        if not self._run(self._at):
            raise EmptyBufferError("ReplayBuffer.sample: the buffer is empty")
        return self.out

    def update_priority(self, priority) -> None:
        """``rb.update_priority(out["index"], priority)`` for the rows this call last drew (the
        prepared prioritized loop's update: one compiled call, priorities checked inside it)."""
        sampler = self._sampler
        if type(sampler) is not PrioritizedSampler:
            raise ConfigError("PreparedSample.update_priority: the sampler is not a PrioritizedSampler")
        priority = np.ascontiguousarray(priority, np.float64)
        if priority.shape != self.index.shape:
            raise ShapeError(f"update_priority: priority has shape {priority.shape}, expected {self.index.shape}")
        if not self._update(self._at, priority, sampler.alpha, sampler.eps):
            raise ConfigError("update_priority: priorities must be finite and >= 0")
