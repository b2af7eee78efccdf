"""TensorDict: a dict of arrays (and TensorDicts) sharing leading batch dimensions.

Follows the axioms of the TensorDict RFC (seed 002): entries may nest; the batch size is required
and every entry's leading dimensions must equal it; any dtype; an optional device, in which case
every leaf is a dispatchrl :class:`Array` on it (numpy input is copied there). Without a device the
leaves are plain numpy arrays (memory-mapped ones after :meth:`TensorDict.memmap`).

Indexing by key (``td["a"]``, ``td["a", "b"]``) returns an entry; indexing by anything numpy
accepts (``td[0]``, ``td[2:5]``, ``td[mask]``, ``td[index_array]``) indexes the batch dimensions of
every leaf and returns a TensorDict whose batch size follows numpy's rules.
"""

import json
import os
import re
from typing import Any

import numpy as np

from ..arrays import Array, asarray, assign, to_numpy
from ..devices import Device
from ..errors import DeviceError, LockedError, MissingKeyError, ShapeError
from ..files import atomic_write_text
from ..memory import host_view, space_of

__all__ = ["TensorDict", "cat", "flat_key", "host_leaf", "stack"]

#: file written next to the .npy leaves by :meth:`TensorDict.memmap`
META_FILE = "tensordict.json"
_SAFE_KEY = re.compile(r"^[A-Za-z0-9_\-][A-Za-z0-9_.\-]*$")
_MISSING = object()


def flat_key(key):
    """A NestedKey (str, or tuples of tuples of str) as a flat tuple of str; None if not a key."""
    if isinstance(key, str):
        return (key,)
    if isinstance(key, tuple) and key:
        out = []
        for part in key:
            sub = flat_key(part)
            if sub is None:
                return None
            out.extend(sub)
        return tuple(out)
    return None


def _batch_tuple(batch_size, name="batch_size"):
    if batch_size is None:
        raise ShapeError(f"TensorDict: '{name}' is required (use [] for no batch dimensions)")
    if isinstance(batch_size, (int, np.integer)):
        batch_size = (batch_size,)
    try:
        out = tuple(int(s) for s in batch_size)
    except TypeError:
        raise ShapeError(f"TensorDict: '{name}' must be a sequence of ints, got {batch_size!r}") from None
    if any(s < 0 for s in out):
        raise ShapeError(f"TensorDict: '{name}' must be non-negative, got {out}")
    return out


def _contiguous(x):
    """``x`` C-contiguous, keeping 0-d arrays 0-d (np.ascontiguousarray makes them 1-d)."""
    return np.asarray(x, order="C")


def host_leaf(leaf):
    """The host (numpy) view of a leaf; a copy for leaves host code cannot address (CUDA)."""
    if isinstance(leaf, Array):
        view = host_view(space_of(leaf.device), leaf.data)
        return view if view is not None else to_numpy(leaf)
    return leaf


def _put(device, host):
    """``host`` as a leaf of a TensorDict on ``device`` (None: numpy)."""
    if device is None:
        return host
    if host.ndim == 0 or host.size == 0:
        raise ShapeError(
            f"TensorDict on {device!r}: leaves must have a non-empty shape (got {host.shape}); "
            "use device=None for scalars or empty batches"
        )
    return asarray(device, host)


def _normalize_index(index, batch_ndim):
    """``index`` as a tuple that addresses batch dimensions only (Ellipsis expanded over them)."""
    if not isinstance(index, tuple):
        index = (index,)
    used = 0
    for part in index:
        if part is None or part is Ellipsis:
            continue
        if isinstance(part, np.ndarray) and part.dtype == np.bool_:
            used += part.ndim
        elif isinstance(part, (list,)) and np.asarray(part).dtype == np.bool_:
            used += np.asarray(part).ndim
        else:
            used += 1
    if used > batch_ndim:
        raise ShapeError(f"TensorDict index {index!r} addresses {used} dimensions, but the batch has {batch_ndim}")
    if any(part is Ellipsis for part in index):
        at = next(i for i, part in enumerate(index) if part is Ellipsis)
        index = index[:at] + (slice(None),) * (batch_ndim - used) + index[at + 1 :]
        if any(part is Ellipsis for part in index):
            raise ShapeError("TensorDict index: at most one Ellipsis")
    else:
        index = index + (slice(None),) * (batch_ndim - used)
    return index


class TensorDict:
    """A dict of arrays and TensorDicts whose leading dimensions all equal ``batch_size``."""

    # __dict__: entries read as attributes are cached there (see __getattr__)
    __slots__ = ("__dict__", "_batch_size", "_device", "_entries", "_locked")

    def __init__(self, source, batch_size, device=None):
        if device is not None and not isinstance(device, Device):
            raise DeviceError(f"TensorDict: 'device' must be a dispatchrl Device or None, got {device!r}")
        if isinstance(source, TensorDict):
            source = source._entries
        if not hasattr(source, "items"):
            raise ShapeError(f"TensorDict: 'source' must be a dict or TensorDict, got {type(source).__name__}")
        self._batch_size = _batch_tuple(batch_size)
        self._device = device
        self._locked = False
        self._entries = {}
        for key, value in source.items():
            self.set(key, value)

    # ---- construction helpers -------------------------------------------------------------
    @classmethod
    def _raw(cls, entries, batch_size, device):
        """A TensorDict over already-checked entries (no copies)."""
        td = cls.__new__(cls)
        td._entries, td._batch_size, td._device, td._locked = entries, tuple(batch_size), device, False
        return td

    def _convert(self, name, value):
        """``value`` checked against the batch size and put on this TensorDict's device."""
        batch = self._batch_size
        if isinstance(value, TensorDict):
            if value.batch_size[: len(batch)] != batch:
                raise ShapeError(
                    f"TensorDict: entry '{name}' has batch size {value.batch_size}, which does not start with {batch}"
                )
            return value if value.device == self._device else value.to(self._device)
        if isinstance(value, dict):
            sub = TensorDict._raw({}, batch, self._device)
            for key, item in value.items():
                if not isinstance(key, str):
                    raise MissingKeyError(f"TensorDict: key {key!r} under '{name}' is not a str")
                sub._entries[key] = sub._convert(f"{name}.{key}", item)
            return sub
        if isinstance(value, Array):
            shape = value.shape
            if self._device is not None and type(value.device) is type(self._device):
                host = None
            else:
                host = host_leaf(value)
        else:
            host = np.asanyarray(value)
            if host.dtype == object:
                raise ShapeError(f"TensorDict: entry '{name}' is not an array (object dtype)")
            shape = host.shape
        if tuple(shape[: len(batch)]) != batch:
            raise ShapeError(
                f"TensorDict: entry '{name}' has shape {tuple(shape)}, whose leading dimensions "
                f"do not match the batch size {batch}"
            )
        if host is None:
            return value
        if self._device is None:
            return host
        return _put(self._device, _contiguous(host))

    # ---- properties -----------------------------------------------------------------------
    @property
    def batch_size(self) -> tuple:
        return self._batch_size

    shape = batch_size

    @property
    def batch_dims(self) -> int:
        return len(self._batch_size)

    ndim = batch_dims

    @property
    def device(self):
        return self._device

    @property
    def is_locked(self) -> bool:
        return self._locked

    def numel(self) -> int:
        return int(np.prod(self._batch_size, dtype=np.int64))

    def __len__(self) -> int:
        return self._batch_size[0] if self._batch_size else 0

    def __iter__(self):
        if not self._batch_size:
            raise ShapeError("TensorDict: cannot iterate over a TensorDict with no batch dimensions")
        return (self[i] for i in range(self._batch_size[0]))

    # ---- dict-like ------------------------------------------------------------------------
    def keys(self, include_nested=False, leaves_only=False):
        """Top-level keys (strings) by default; with ``include_nested``, nested keys as tuples."""
        out = []
        for key, value in self._entries.items():
            is_td = isinstance(value, TensorDict)
            if not (leaves_only and is_td):
                out.append(key)
            if include_nested and is_td:
                out.extend((key,) + flat_key(sub) for sub in value.keys(True, leaves_only))
        return out

    def values(self, include_nested=False, leaves_only=False):
        return [self[key] for key in self.keys(include_nested, leaves_only)]

    def items(self, include_nested=False, leaves_only=False):
        return [(key, self[key]) for key in self.keys(include_nested, leaves_only)]

    def __getattr__(self, name: str) -> Any:
        """Entry ``name`` read as an attribute (``td.obs``), as Tianshou's Batch and TorchRL's
        tensorclass read them: a TensorDict then stands wherever generic functions take a struct
        of Arrays (a dataclass). Methods and properties win over entries of the same name."""
        if name.startswith("_"):  # never an entry; also keeps copy/pickle probes off _entries
            raise AttributeError(name)
        try:
            value = self._entries[name]
        except KeyError:
            raise AttributeError(f"TensorDict has no entry or attribute {name!r}; keys: {self.keys()}") from None
        # later reads find it in the instance dict, as fast as a dataclass field (kernel
        # declarations read struct fields on every eager call); set and del drop it again
        self.__dict__[name] = value
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        """``td.obs = x`` sets entry ``obs`` (checked, refused when locked) rather than a plain
        attribute that reads would then return in its place."""
        if name.startswith("_"):
            object.__setattr__(self, name, value)
        else:
            self.set(name, value)

    def named_leaves(self, prefix="", sep=".") -> list:
        """(``prefix`` + key path joined by ``sep``, leaf) for every leaf, nested ones included, in
        insertion order: how :func:`dispatchrl.fuse`, the aliasing check and checkpoints name them."""
        out = []
        for key, value in self._entries.items():
            if isinstance(value, TensorDict):
                out.extend(value.named_leaves(f"{prefix}{key}{sep}", sep))
            else:
                out.append((f"{prefix}{key}", value))
        return out

    #: the protocol of dispatchrl.dispatch.keyed_leaves: fuse, the aliasing check and
    #: checkpoints see the leaves as a struct's fields
    __dispatchrl_leaves__ = named_leaves

    def __contains__(self, key) -> bool:
        return self.get(key, _MISSING) is not _MISSING

    def get(self, key, default=None):
        flat = flat_key(key)
        if flat is None:
            raise MissingKeyError(f"TensorDict: {key!r} is not a key (a str or a tuple of str)")
        node = self
        for part in flat:
            if not isinstance(node, TensorDict) or part not in node._entries:
                return default
            node = node._entries[part]
        return node

    def set(self, key, value) -> "TensorDict":
        """Set entry ``key`` (nested tuple keys create sub-TensorDicts). Refused when locked."""
        flat = flat_key(key)
        if flat is None:
            raise MissingKeyError(f"TensorDict: {key!r} is not a key (a str or a tuple of str)")
        if self._locked:
            raise LockedError(f"TensorDict is locked: cannot set '{'.'.join(flat)}' (unlock_() first)")
        node = self
        for part in flat[:-1]:
            child = node._entries.get(part)
            if child is None:
                child = node._entries[part] = TensorDict({}, node._batch_size, node._device)
            elif not isinstance(child, TensorDict):
                raise ShapeError(f"TensorDict: entry '{part}' is a leaf, cannot hold key {key!r}")
            node = child
        node._entries[flat[-1]] = node._convert(".".join(flat), value)
        node.__dict__.pop(flat[-1], None)  # the attribute cache of __getattr__
        return self

    def pop(self, key, default=_MISSING):
        flat = flat_key(key)
        value = self.get(flat, _MISSING)
        if value is _MISSING:
            if default is not _MISSING:
                return default
            raise MissingKeyError(f"TensorDict has no key {key!r}")
        del self[flat]
        return value

    def __delitem__(self, key):
        flat = flat_key(key)
        if self._locked:
            raise LockedError(f"TensorDict is locked: cannot delete {key!r}")
        parent = self.get(flat[:-1]) if len(flat) > 1 else self
        if not isinstance(parent, TensorDict) or flat[-1] not in parent._entries:
            raise MissingKeyError(f"TensorDict has no key {key!r}")
        del parent._entries[flat[-1]]
        parent.__dict__.pop(flat[-1], None)

    def update(self, other) -> "TensorDict":
        for key, value in other.items():
            self.set(key, value)
        return self

    # ---- indexing -------------------------------------------------------------------------
    def __getitem__(self, index):
        flat = flat_key(index)
        if flat is not None:
            value = self.get(flat, _MISSING)
            if value is _MISSING:
                raise MissingKeyError(f"TensorDict has no key {index!r}; keys: {self.keys()}")
            return value
        return self._index(index)

    def _index(self, index):
        if isinstance(index, list):
            index = np.asarray(index)
        if isinstance(index, Array):
            index = host_leaf(index)
        if isinstance(index, tuple):
            index = tuple(host_leaf(i) if isinstance(i, Array) else i for i in index)
        index = _normalize_index(index, self.batch_dims)
        probe = np.broadcast_to(np.zeros((), np.uint8), self._batch_size)
        batch = probe[index].shape
        return self._index_normalized(index, batch)

    def _take_rows(self, index, count):
        """Rows ``index`` (1-d int array of ``count``) along the first batch dimension of a
        TensorDict with host leaves: the replay buffer's sampling path, without index parsing."""
        entries = {}
        for key, value in self._entries.items():
            if type(value) is TensorDict:
                entries[key] = value._take_rows(index, count)
            else:
                entries[key] = value[index]
        return TensorDict._raw(entries, (count,) + self._batch_size[1:], None)

    def _index_normalized(self, index, batch):
        entries = {}
        for key, value in self._entries.items():
            if isinstance(value, TensorDict):
                inner = index + (slice(None),) * (value.batch_dims - self.batch_dims)
                sub_batch = batch + value._batch_size[self.batch_dims :]
                entries[key] = value._index_normalized(inner, sub_batch)
            else:
                entries[key] = (
                    _put(self._device, _contiguous(host_leaf(value)[index]))
                    if self._device is not None
                    else host_leaf(value)[index]
                )
        return TensorDict._raw(entries, batch, self._device)

    def __setitem__(self, index, value):
        flat = flat_key(index)
        if flat is not None:
            self.set(flat, value)
            return
        index = _normalize_index(index, self.batch_dims)
        if not isinstance(value, TensorDict):
            raise ShapeError("TensorDict: assigning to an index needs a TensorDict value")
        for key in self.keys(include_nested=True, leaves_only=True):
            source = value.get(key, _MISSING)
            if source is _MISSING:
                raise MissingKeyError(f"TensorDict assignment: value has no key {key!r}")
            leaf = self[key]
            src = host_leaf(source) if isinstance(source, Array) else np.asarray(source)
            try:
                if isinstance(leaf, Array) and host_view(space_of(leaf.device), leaf.data) is None:
                    host = to_numpy(leaf)
                    host[index] = src
                    assign(leaf, host)
                else:
                    host_leaf(leaf)[index] = src
            except ValueError as exc:
                raise ShapeError(f"TensorDict assignment: entry {key!r}: {exc}") from None

    # ---- shape operations -----------------------------------------------------------------
    def reshape(self, *shape) -> "TensorDict":
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        try:
            new = np.broadcast_to(np.zeros((), np.uint8), self._batch_size).reshape(shape).shape
        except ValueError:
            raise ShapeError(f"TensorDict.reshape: cannot reshape batch {self._batch_size} to {shape}") from None
        return self.apply(lambda x: x.reshape(new + x.shape[self.batch_dims :]), batch_size=new)

    def split(self, sizes, dim=0) -> list:
        """Pieces along batch dimension ``dim``: of ``sizes`` each (an int), or of the listed sizes."""
        if not 0 <= dim < self.batch_dims:
            raise ShapeError(f"TensorDict.split: dim {dim} out of range for batch {self._batch_size}")
        n = self._batch_size[dim]
        if isinstance(sizes, (int, np.integer)):
            if sizes <= 0:
                raise ShapeError(f"TensorDict.split: 'sizes' must be positive, got {sizes}")
            sizes = [min(sizes, n - s) for s in range(0, n, sizes)]
        if sum(sizes) != n:
            raise ShapeError(f"TensorDict.split: sizes {list(sizes)} do not add up to {n}")
        out, start = [], 0
        for size in sizes:
            index = (slice(None),) * dim + (slice(start, start + size),)
            out.append(self[index])
            start += size
        return out

    def unbind(self, dim=0) -> list:
        return [self[(slice(None),) * dim + (i,)] for i in range(self._batch_size[dim])]

    def apply(self, fn, *others, batch_size=None, device=_MISSING) -> "TensorDict":
        """A new TensorDict of ``fn(leaf, *other_leaves)`` over every leaf (host numpy arrays in,
        arrays out), with the same batch size unless ``batch_size`` is given."""
        batch = self._batch_size if batch_size is None else _batch_tuple(batch_size)
        dev = self._device if device is _MISSING else device
        entries = {}
        for key, value in self._entries.items():
            other_values = []
            for other in others:
                if key not in other._entries:
                    raise MissingKeyError(f"TensorDict.apply: other TensorDict has no key '{key}'")
                other_values.append(other._entries[key])
            if isinstance(value, TensorDict):
                sub_batch = (
                    batch + value._batch_size[self.batch_dims :] if batch_size is not None else value._batch_size
                )
                entries[key] = value.apply(fn, *other_values, batch_size=sub_batch, device=dev)
            else:
                result = fn(host_leaf(value), *(host_leaf(v) for v in other_values))
                entries[key] = result
        return TensorDict(entries, batch, dev)

    def to(self, device) -> "TensorDict":
        """A copy on ``device`` (a dispatchrl Device), or with numpy leaves (``None``)."""
        if device is not None and not isinstance(device, Device):
            raise DeviceError(f"TensorDict.to: expected a dispatchrl Device or None, got {device!r}")
        return self.apply(lambda x: np.array(x), device=device)

    def numpy(self) -> dict:
        """A nested dict of host numpy copies."""
        return {
            k: (v.numpy() if isinstance(v, TensorDict) else np.array(host_leaf(v))) for k, v in self._entries.items()
        }

    def clone(self) -> "TensorDict":
        return self.apply(lambda x: np.array(x))

    def flatten_keys(self, sep=".") -> "TensorDict":
        """Nested entries as top-level keys joined by ``sep`` (leaves shared, not copied)."""
        entries = {}
        for key in self.keys(include_nested=True, leaves_only=True):
            flat = flat_key(key)
            name = sep.join(flat)
            if name in entries:
                raise ShapeError(f"TensorDict.flatten_keys: key '{name}' occurs twice")
            entries[name] = self[flat]
        return TensorDict._raw(entries, self._batch_size, self._device)

    def unflatten_keys(self, sep=".") -> "TensorDict":
        """The inverse of :meth:`flatten_keys`: keys containing ``sep`` become nested entries."""
        out = TensorDict._raw({}, self._batch_size, self._device)
        for key, value in self._entries.items():
            if isinstance(value, TensorDict):
                value = value.unflatten_keys(sep)
            out.set(tuple(key.split(sep)), value)
        return out

    def lock_(self) -> "TensorDict":
        """Refuse adding, replacing or deleting entries (in-place writes to arrays stay allowed)."""
        self._locked = True
        for value in self._entries.values():
            if isinstance(value, TensorDict):
                value.lock_()
        return self

    def unlock_(self) -> "TensorDict":
        self._locked = False
        for value in self._entries.values():
            if isinstance(value, TensorDict):
                value.unlock_()
        return self

    # ---- printing -------------------------------------------------------------------------
    def __repr__(self) -> str:
        return self._repr(0)

    def _repr(self, depth):
        pad = "    " * (depth + 1)
        lines = [f"{type(self).__name__}(", f"{pad}fields={{"]
        for key in sorted(self._entries):
            value = self._entries[key]
            if isinstance(value, TensorDict):
                body = value._repr(depth + 2)
            else:
                kind = "Array" if isinstance(value, Array) else type(value).__name__
                body = f"{kind}(shape={tuple(value.shape)}, dtype={np.dtype(value.dtype).name})"
            lines.append(f"{pad}    {key}: {body},")
        lines.append(f"{pad}}},")
        lines.append(f"{pad}batch_size={self._batch_size},")
        lines.append(f"{pad}device={self._device!r})")
        return "\n".join(lines)

    # ---- memory maps ----------------------------------------------------------------------
    def memmap(self, path) -> "TensorDict":
        """Write one ``.npy`` per leaf under folder ``path`` (nested keys become subfolders) and
        a json of metadata; no pickle. Returns the TensorDict reopened over those files."""
        os.makedirs(path, exist_ok=True)
        leaves = {}
        for key in self.keys(include_nested=True, leaves_only=True):
            flat = flat_key(key)
            for part in flat:
                if not _SAFE_KEY.match(part):
                    raise ShapeError(
                        f"TensorDict.memmap: key {key!r} is not a safe file name "
                        "(letters, digits, '_', '-', '.', not starting with '.')"
                    )
            host = _contiguous(host_leaf(self[flat]))
            if host.dtype.hasobject:
                raise ShapeError(f"TensorDict.memmap: entry {key!r} has an object dtype")
            rel = os.path.join(*flat) + ".npy"
            os.makedirs(os.path.dirname(os.path.join(path, rel)) or path, exist_ok=True)
            np.save(os.path.join(path, rel), host, allow_pickle=False)
            leaves[rel] = {"key": list(flat), "shape": list(host.shape), "dtype": host.dtype.str}
        subs = {}
        for key in self.keys(include_nested=True):
            if isinstance(self[key], TensorDict):
                flat = flat_key(key)
                subs[".".join(flat)] = {"key": list(flat), "batch_size": list(self[flat].batch_size)}
        _write_meta(path, self._batch_size, leaves, list(subs.values()))
        return TensorDict.load_memmap(path)

    @classmethod
    def empty_memmap(cls, path, batch_size, spec) -> "TensorDict":
        """Zero-filled memory-mapped leaves under ``path`` without building them in memory:
        ``spec`` maps flat key tuples to (shape, dtype); nested entries share ``batch_size``."""
        batch_size = _batch_tuple(batch_size)
        os.makedirs(path, exist_ok=True)
        leaves, nested = {}, {}
        for flat, (shape, dtype) in spec.items():
            for part in flat:
                if not _SAFE_KEY.match(part):
                    raise ShapeError(f"TensorDict.empty_memmap: key {flat!r} is not a safe file name")
            for depth in range(1, len(flat)):
                nested[flat[:depth]] = {"key": list(flat[:depth]), "batch_size": list(batch_size)}
            rel = os.path.join(*flat) + ".npy"
            os.makedirs(os.path.dirname(os.path.join(path, rel)) or path, exist_ok=True)
            array = np.lib.format.open_memmap(os.path.join(path, rel), mode="w+", dtype=dtype, shape=tuple(shape))
            array.flush()
            del array
            leaves[rel] = {"key": list(flat), "shape": list(shape), "dtype": np.dtype(dtype).str}
        _write_meta(path, batch_size, leaves, list(nested.values()))
        return cls.load_memmap(path)

    @classmethod
    def load_memmap(cls, path, mode="r+") -> "TensorDict":
        """Reopen a folder written by :meth:`memmap`: leaves are numpy memmaps (nothing is read
        until it is indexed)."""
        meta_path = os.path.join(path, META_FILE)
        try:
            with open(meta_path) as f:
                meta = json.load(f)
        except FileNotFoundError:
            raise MissingKeyError(f"TensorDict.load_memmap: no {META_FILE} in {path!r}") from None
        if meta.get("format") != "dispatchrl.TensorDict":
            raise ShapeError(f"TensorDict.load_memmap: {meta_path} is not a dispatchrl TensorDict")
        td = cls._raw({}, meta["batch_size"], None)
        for sub in sorted(meta["nested"], key=lambda s: len(s["key"])):
            td.set(tuple(sub["key"]), TensorDict({}, sub["batch_size"]))
        for rel, info in meta["leaves"].items():
            if os.path.isabs(rel) or ".." in rel.split(os.sep):
                raise ShapeError(f"TensorDict.load_memmap: unsafe leaf path {rel!r}")
            array = np.load(os.path.join(path, rel), mmap_mode=mode, allow_pickle=False)
            if list(array.shape) != info["shape"] or array.dtype.str != info["dtype"]:
                raise ShapeError(
                    f"TensorDict.load_memmap: {rel} has shape {array.shape} dtype {array.dtype}, "
                    f"metadata says {info['shape']} {info['dtype']}"
                )
            td.set(tuple(info["key"]), array)
        return td


def _write_meta(path, batch_size, leaves, nested):
    meta = {
        "format": "dispatchrl.TensorDict",
        "version": 1,
        "batch_size": list(batch_size),
        "leaves": leaves,
        "nested": nested,
    }
    atomic_write_text(os.path.join(path, META_FILE), json.dumps(meta, indent=1))


def _check_same_keys(tds, what):
    keys = sorted(map(flat_key, tds[0].keys(include_nested=True, leaves_only=True)))
    for i, td in enumerate(tds[1:], 1):
        other = sorted(map(flat_key, td.keys(include_nested=True, leaves_only=True)))
        if other != keys:
            missing = set(keys) ^ set(other)
            raise MissingKeyError(f"{what}: TensorDict {i} differs in keys {sorted(missing)}")
    return keys


def stack(tds, dim=0) -> TensorDict:
    """TensorDicts of equal batch size stacked along a new batch dimension ``dim``."""
    tds = list(tds)
    if not tds or not all(isinstance(t, TensorDict) for t in tds):
        raise ShapeError("stack: expected a non-empty sequence of TensorDicts")
    batch = tds[0].batch_size
    for i, td in enumerate(tds):
        if td.batch_size != batch:
            raise ShapeError(f"stack: TensorDict {i} has batch size {td.batch_size}, expected {batch}")
    if not 0 <= dim <= len(batch):
        raise ShapeError(f"stack: dim {dim} out of range for batch {batch}")
    _check_same_keys(tds, "stack")
    new_batch = batch[:dim] + (len(tds),) + batch[dim:]
    out = TensorDict({}, new_batch, tds[0].device)
    for key in tds[0].keys():
        if isinstance(tds[0][key], TensorDict):
            out.set(key, stack([td[key] for td in tds], dim))
            continue
        parts = [host_leaf(td[key]) for td in tds]
        try:
            out.set(key, np.stack(parts, axis=dim))
        except ValueError as exc:
            raise ShapeError(f"stack: entry {key!r}: {exc}") from None
    return out


def cat(tds, dim=0) -> TensorDict:
    """TensorDicts concatenated along existing batch dimension ``dim``."""
    tds = list(tds)
    if not tds or not all(isinstance(t, TensorDict) for t in tds):
        raise ShapeError("cat: expected a non-empty sequence of TensorDicts")
    batch = tds[0].batch_size
    if not 0 <= dim < len(batch):
        raise ShapeError(f"cat: dim {dim} out of range for batch {batch}")
    for i, td in enumerate(tds):
        others = td.batch_size[:dim] + td.batch_size[dim + 1 :]
        if td.batch_dims != len(batch) or others != batch[:dim] + batch[dim + 1 :]:
            raise ShapeError(f"cat: TensorDict {i} has batch size {td.batch_size}, incompatible with {batch}")
    _check_same_keys(tds, "cat")
    new_batch = batch[:dim] + (sum(td.batch_size[dim] for td in tds),) + batch[dim + 1 :]
    out = TensorDict({}, new_batch, tds[0].device)
    for key in tds[0].keys():
        if isinstance(tds[0][key], TensorDict):
            out.set(key, cat([td[key] for td in tds], dim))
            continue
        try:
            out.set(key, np.concatenate([host_leaf(td[key]) for td in tds], axis=dim))
        except ValueError as exc:
            raise ShapeError(f"cat: entry {key!r}: {exc}") from None
    return out
