"""Checkpoints: one ``.npz`` file per checkpoint, arrays plus metadata, never pickle.

A training state is a tree of dataclasses and lists whose leaves are Arrays; every leaf is saved
under its path (``actor.weights.0.m``), so a checkpoint holds weights, optimizer moments, replay
buffer, RNG streams, env state and counters: everything needed to continue bit for bit. Fields
declared ``field(metadata=SCRATCH)`` (activations and other buffers every step writes before it reads
them) are not saved: a restored state keeps them as built, zeros, and continues identically.

One file is one atomic unit: the metadata (JSON, with a SHA-256 digest of metadata and arrays)
is an entry of the same ``.npz``, written to a temporary file, fsync'd and renamed into place,
so a reader sees a whole old checkpoint or a whole new one, never a mix. ``PATH.json`` beside it
is a copy of the metadata for people and tools; the loader never reads it (except for version-1
checkpoints, which kept their metadata there).

Loading refuses, with a :class:`CheckpointError` naming the field, before anything is copied
into the run: a file that is not a whole checkpoint or was edited (digest), missing, extra or
mis-shaped arrays, NaN/inf floats, negative integers (every integer leaf is a count or an index)
and whatever the owners of the state's structs refuse: a dataclass in the state may define
``validate_checkpoint(self, values, context)`` (see :class:`FieldValues`) stating its
invariants (replay position < capacity, ...).

``save(path, ..., keep=K)`` writes checkpoint K-rotated into directory ``path``; :func:`latest`
finds the newest complete checkpoint (of a file or such a directory), and every loader goes
through it. Older formats load through :func:`migration` functions.
"""

import dataclasses
import errno
import hashlib
import json
import math
import os
import re
import socket
import sys
import time
import warnings
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, BinaryIO

import numpy as np

from .arrays import Array, assign, to_numpy
from .dispatch import keyed_leaves
from .errors import CheckpointError, CheckpointWriteError, ConfigError
from .files import atomic_write, atomic_write_text

__all__ = [
    "FORMAT",
    "MIGRATIONS",
    "SCRATCH",
    "VERSION",
    "FieldValues",
    "SaveLock",
    "check_values",
    "latest",
    "load",
    "load_metadata",
    "migration",
    "named_arrays",
    "paths",
    "remove_stale_temporaries",
    "restore",
    "save",
    "scratch_arrays",
    "write",
]

FORMAT = "dispatchrl-checkpoint"
#: 1: arrays in PATH.npz, metadata in PATH.json; 2: metadata and digest inside the npz; 3: State
#: fields renamed (the migration lives with the states' owner, dispatchrl.training.runs); 4: the
#: learner statistics fields added (TD3/SAC critic_stats, actor_stats; PPO explained_variance); 5:
#: scratch fields (:data:`SCRATCH`) no longer saved, nor the episode log: its ring of the latest
#: episodes is scratch, the finished episodes are saved as the run's history (``history.*``)
VERSION = 5
#: the npz entry holding the metadata document (uint8 UTF-8 JSON)
METADATA_ENTRY = "__checkpoint__"
#: a rotated checkpoint's file name in a checkpoint directory
ROTATED = re.compile(r"^step-(\d{12})\.npz$")
#: a checkpoint file's temporary while :func:`dispatchrl.files.atomic_write` writes it:
#: ``.<target>.<writer's pid>.<random>.tmp``
#: (before the pid was part of the name: ``.<target>.<random>.tmp``)
TEMPORARY = re.compile(r"^\.(?P<target>.+\.(?:npz|json))\.(?:(?P<pid>\d+)\.)?[a-z0-9_]+\.tmp$")
#: the permissions of a checkpoint's files: its owner's only (mkstemp's, as they always were)
CHECKPOINT_MODE = 0o600
#: a temporary without its writer's pid is left alone this long (its writer may still be at it)
UNNAMED_TEMPORARY_SECONDS = 600

#: version → function(document, arrays) -> (document, arrays) of version + 1
MIGRATIONS: dict[int, Callable[[dict, dict], tuple[dict, dict]]] = {}


def migration(from_version):
    """Register ``fn(document, arrays) -> (document, arrays)`` turning a checkpoint of
    ``from_version`` into one of ``from_version + 1`` (it must set ``document["version"]``)."""

    def register(fn):
        MIGRATIONS[int(from_version)] = fn
        return fn

    return register


#: dataclass field metadata of a training state's scratch fields, ``field(metadata=SCRATCH)``:
#: buffers (activations, sampled batches, per-step intermediates) that every use writes before it
#: reads them, so their contents at a chunk boundary never reach the numbers. Checkpoints leave
#: them out; a restored state keeps them as built (zeros).
SCRATCH: Mapping[str, bool] = MappingProxyType({"scratch": True})


def _saved(field) -> bool:
    return field.metadata.get("checkpoint", True) and not field.metadata.get("scratch", False)


def _not_a_view(field) -> bool:
    return field.metadata.get("checkpoint", True)


def _keyed_leaves(tree, prefix) -> list | None:
    """(``prefix`` + key path + ".", leaf) of a TensorDict (its keys are named as a dataclass's
    fields would be); None for anything else."""
    leaves = keyed_leaves(tree, prefix)
    return None if leaves is None else [(path + ".", leaf) for path, leaf in leaves]


def named_arrays(tree, prefix="", keep=_saved):
    """(path, Array) for every Array leaf of a tree of dataclasses, TensorDicts, lists and tuples,
    except under fields marked ``metadata={"checkpoint": False}`` (storage the other leaves are
    views of) and :data:`SCRATCH` fields (``keep(field)`` says which fields to enter)."""
    if isinstance(tree, Array):
        yield prefix, tree
    elif (leaves := _keyed_leaves(tree, prefix)) is not None:
        yield from ((path, leaf) for path, leaf in leaves if isinstance(leaf, Array))
    elif dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        for field in dataclasses.fields(tree):
            if keep(field):
                yield from named_arrays(getattr(tree, field.name), f"{prefix}{field.name}.", keep)
    elif isinstance(tree, (list, tuple)):
        for i, item in enumerate(tree):
            yield from named_arrays(item, f"{prefix}{i}.", keep)


def scratch_arrays(tree, prefix=""):
    """(path, Array) for every Array leaf under the :data:`SCRATCH` fields of a tree: what
    checkpoints leave out, named as :func:`named_arrays` names leaves (and as format 4 saved them)."""
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        for field in dataclasses.fields(tree):
            value, path = getattr(tree, field.name), f"{prefix}{field.name}."
            if field.metadata.get("scratch", False):
                yield from named_arrays(value, path, _not_a_view)
            elif field.metadata.get("checkpoint", True):
                yield from scratch_arrays(value, path)
    elif isinstance(tree, (list, tuple)):
        for i, item in enumerate(tree):
            yield from scratch_arrays(item, f"{prefix}{i}.")


def paths(path):
    """``run`` / ``run.npz`` / ``run.json`` → (run.npz, run.json)."""
    path = Path(path)
    stem = path.with_suffix("") if path.suffix in (".npz", ".json") else path
    return stem.with_name(stem.name + ".npz"), stem.with_name(stem.name + ".json")


# ---------------------------------------------------------------- writing


def _digest(metadata, arrays):
    """SHA-256 of the metadata (canonical JSON, digest excluded) and every array's name, dtype,
    shape and bytes: any edit or corruption of a checkpoint changes it."""
    h = hashlib.sha256(json.dumps({k: v for k, v in metadata.items() if k != "digest"}, sort_keys=True).encode())
    for name in sorted(arrays):
        value = np.ascontiguousarray(arrays[name])
        h.update(f"\0{name}\0{value.dtype.str}\0{value.shape}\0".encode())
        h.update(value.tobytes())
    return h.hexdigest()


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # e.g. another user's process: alive
        return True
    return True


def remove_stale_temporaries(directory, targets=None) -> list[Path]:
    """Remove the temporaries that writers of checkpoint files (of names in ``targets``; default:
    rotated ``step-*`` checkpoints) left in ``directory`` when they were killed mid-write: those of
    processes no longer alive, and unnamed ones older than :data:`UNNAMED_TEMPORARY_SECONDS`.
    Each is as large as a checkpoint. Returns the paths removed."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    removed = []
    for name in names:
        match = TEMPORARY.match(name)
        if match is None:
            continue
        target = match["target"]
        if not (target in targets if targets is not None else ROTATED.match(paths(target)[0].name)):
            continue
        path = Path(directory) / name
        pid = match["pid"]
        try:
            if pid is not None:
                stale = int(pid) != os.getpid() and not _process_alive(int(pid))
            else:
                stale = time.time() - path.stat().st_mtime > UNNAMED_TEMPORARY_SECONDS
            if stale:
                path.unlink()
                removed.append(path)
        except OSError:
            continue
    return removed


def _newest_complete(path) -> str | None:
    """The newest complete checkpoint at ``path`` as a string, or None (never warns or raises)."""
    try:
        return str(_latest(path)[0])
    except CheckpointError:
        return None


def _write_failed(path, target, error: OSError) -> CheckpointWriteError:
    """The error of a failed checkpoint write, naming the newest complete checkpoint left."""
    last_good = _newest_complete(path)
    reason = error.strerror or str(error)
    kept = (
        f"the newest complete checkpoint is {last_good}" if last_good else f"there is no complete checkpoint at {path}"
    )
    full = " free space on its disk (or choose another path) and" if error.errno == errno.ENOSPC else ""
    return CheckpointWriteError(
        f"could not write checkpoint {target}: {reason}; nothing was replaced, {kept}."
        + (f" To continue:{full} resume from {last_good}" if last_good else ""),
        str(path),
        last_good,
        error.errno,
    )


def write(path, arrays, metadata):
    """Write one checkpoint file ``path`` (.npz) atomically from host ``arrays`` and JSON-able
    ``metadata``, plus its ``.json`` copy; returns (npz path, json path). A write that fails (a
    full disk) raises :class:`CheckpointWriteError` naming the newest complete checkpoint left;
    a checkpoint that was whole before stays whole."""
    try:
        return _write(path, arrays, metadata)
    except OSError as e:
        raise _write_failed(path, paths(path)[0], e) from e


def _write(path, arrays, metadata) -> tuple[Path, Path]:
    npz_path, json_path = paths(path)
    npz_path.parent.mkdir(parents=True, exist_ok=True)
    document = {**metadata, "format": FORMAT, "version": VERSION}
    document["digest"] = _digest(document, arrays)
    text = json.dumps(document, indent=2, sort_keys=True)
    entries: dict[str, Any] = {**arrays, METADATA_ENTRY: np.frombuffer(text.encode(), np.uint8)}
    atomic_write(npz_path, lambda f: np.savez(f, **entries), CHECKPOINT_MODE)
    atomic_write_text(json_path, text, CHECKPOINT_MODE)  # a readable copy, never loaded
    return npz_path, json_path


def save(path, state, metadata, keep=None, step=None, extra=None):
    """Checkpoint ``state`` (every Array leaf) with ``metadata`` (and the host arrays ``extra``,
    named apart from the state's leaves, which the loader must take out before :func:`restore`).

    ``keep=None``: one checkpoint, ``PATH.npz`` (+ ``PATH.json``), replaced atomically.
    ``keep=K``: ``path`` is a directory of checkpoints; this one is ``step-<step>.npz`` (``step``
    defaults to ``metadata["steps"]``) and all but the newest K are removed afterwards.
    Returns (npz path, json path)."""
    arrays = {name.rstrip("."): to_numpy(arr) for name, arr in named_arrays(state)}
    arrays.update(extra or {})
    if keep is None:
        written = write(path, arrays, metadata)
        remove_stale_temporaries(written[0].parent, {written[0].name, written[1].name})
        return written
    if isinstance(keep, bool) or not isinstance(keep, (int, np.integer)) or keep < 1:
        raise CheckpointError(f"save: 'keep' must be a positive int, got {keep!r}")
    step = metadata.get("steps") if step is None else step
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or not 0 <= step < 10**12:
        raise CheckpointError(f"save: 'step' must be an int in [0, 10**12) to name a rotated checkpoint, got {step!r}")
    directory = Path(path)
    target = directory / f"step-{int(step):012d}"
    remove_stale_temporaries(directory)  # a killed writer's, before they fill the disk
    try:
        written = _write(target, arrays, metadata)
    except OSError as e:
        older = [p for p in _rotated(directory) if p != paths(target)[0]]
        if e.errno != errno.ENOSPC or len(older) < max(int(keep), 2):
            raise _write_failed(directory, paths(target)[0], e) from e
        # a full disk: the oldest is removed first instead of after this save (K-1 stay whole)
        for stale in paths(older[0]):
            stale.unlink(missing_ok=True)
        try:
            written = _write(target, arrays, metadata)
        except OSError as again:
            raise _write_failed(directory, paths(target)[0], again) from again
    for old in _rotated(directory)[: -int(keep)]:
        for stale in paths(old):
            try:
                stale.unlink()
            except FileNotFoundError:
                pass
    return written


def _rotated(directory):
    """Rotated checkpoints in ``directory``, oldest first."""
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [Path(directory) / name for name in sorted(n for n in names if ROTATED.match(n))]


class SaveLock:
    """An exclusive lock on a checkpoint path (``PATH`` of single checkpoints, or a directory of
    rotated ones) for as long as a run writes there, so two runs never replace each other's
    checkpoints. It is an ``flock`` on ``.PATH.lock`` beside it (in a directory: ``DIR/.lock``), which the
    system releases when the holder dies: a dead run's lock is taken over. The file names the
    holder (pid, host, start, command) for the refusal of the next run."""

    def __init__(self, path, directory: bool) -> None:
        self.path = Path(path)
        npz = paths(path)[0]
        self.file = self.path / ".lock" if directory else npz.with_name(f".{npz.stem}.lock")
        self.directory = directory
        self.handle: BinaryIO | None = None

    def acquire(self) -> "SaveLock":
        """Take the lock, or raise :class:`ConfigError` naming the run that holds it. Then
        remove the temporaries killed writers left there (no live writer can be at work)."""
        try:
            import fcntl
        except ImportError:  # no flock (Windows): unlocked, as before
            return self
        self.file.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.file, "a+b", buffering=0)  # unbuffered: nothing left to flush on a full disk
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().decode(errors="replace").strip()
            handle.close()
            try:
                held = json.loads(holder)
                who = f"pid {held['pid']} on {held['host']}, started {held['started']}: {held['command']}"
            except (ValueError, KeyError, TypeError):
                who = holder or "holder unknown"
            raise ConfigError(
                f"--save {self.path}: another run is saving there ({who}); wait for it to finish, or choose "
                f"another --save path"
            ) from None
        self.handle = handle
        this_run = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "command": " ".join(sys.argv),
        }
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(json.dumps(this_run).encode())
        except OSError:  # a full disk: the lock is held all the same, only its holder goes unnamed
            pass
        if self.directory:
            remove_stale_temporaries(self.path)
        else:
            remove_stale_temporaries(self.file.parent, {p.name for p in paths(self.path)})
        return self

    def release(self) -> None:
        if self.handle is not None:
            try:
                self.handle.seek(0)
                self.handle.truncate()  # no holder named any more (the file stays: others may have it open)
            except OSError:
                pass
            finally:
                self.handle.close()  # releases the flock
                self.handle = None

    def __enter__(self) -> "SaveLock":
        return self.acquire()

    def __exit__(self, *_: object) -> None:
        self.release()


# ---------------------------------------------------------------- reading


def latest(path):
    """The npz of the newest complete checkpoint at ``path``: ``PATH.npz`` itself, or the newest
    readable ``step-*.npz`` in directory ``path`` (a damaged newest one falls back to the one
    before, with a warning naming both)."""
    found, damaged = _latest(path)
    if damaged:
        warnings.warn(
            f"checkpoint {damaged[0]} is damaged (not a readable npz); using the previous complete one, "
            f"{found}" + (f" (also damaged: {', '.join(p.name for p in damaged[1:])})" if len(damaged) > 1 else ""),
            RuntimeWarning,
            stacklevel=2,
        )
    return found


def _latest(path) -> tuple[Path, list[Path]]:
    """(newest complete checkpoint at ``path``, the newer damaged ones skipped, newest first)."""
    npz_path, _ = paths(path)
    if npz_path.exists():
        return npz_path, []
    candidates = _rotated(path)
    if not candidates:
        if Path(path).is_dir():
            raise CheckpointError(f"no checkpoint (step-*.npz) in directory {path}")
        raise CheckpointError(f"checkpoint {npz_path} does not exist")
    damaged: list[Path] = []
    for candidate in reversed(candidates):
        try:
            with zipfile.ZipFile(candidate) as z:
                _entry_headers(z, candidate, os.path.getsize(candidate))  # before testzip reads them
                if z.testzip() is None:
                    return candidate, damaged
        except (zipfile.BadZipFile, OSError, CheckpointError):
            pass
        damaged.append(candidate)
    raise CheckpointError(f"every checkpoint in {path} is damaged: {[c.name for c in candidates]}")


#: the largest metadata entry a checkpoint may hold (a run's metadata is a few KiB)
MAX_METADATA_BYTES = 16 << 20
#: how deep the metadata's JSON may nest (a run's metadata nests 3 levels)
MAX_METADATA_DEPTH = 32
#: an npz entry's name: a state path (``actor.weights.0.m``), ``history.<key>`` or the metadata
_ENTRY = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.]*\.npy$")


def _entry_headers(
    z: zipfile.ZipFile, npz_path: object, size_on_disk: int
) -> list[tuple[zipfile.ZipInfo, tuple, np.dtype]]:
    """(ZipInfo, shape, dtype) of every entry, once the zip directory and the entries' ``.npy``
    headers (nothing else is read) are accepted: refuses before any array is read an entry that
    is not a stored (uncompressed) ``.npy`` of plain numbers named as dispatchrl names them, whose
    bytes lie outside the file or differ from what its header declares. What is then read is at
    most the file's own size (np.savez stores; a deflated entry could expand a thousandfold)."""
    infos, names, headers = z.infolist(), set(), []
    for info in infos:
        where = f"checkpoint {npz_path}: entry {info.filename!r}"
        if not _ENTRY.match(info.filename) or info.filename in names:
            raise CheckpointError(f"{where} is not an array entry dispatchrl writes (a unique NAME.npy)")
        names.add(info.filename)
        if info.compress_type != zipfile.ZIP_STORED or info.file_size != info.compress_size:
            raise CheckpointError(
                f"{where} is compressed (zip method {info.compress_type}); dispatchrl writes stored entries, "
                "and a compressed one could expand far beyond the file's size"
            )
        if info.header_offset + info.compress_size > size_on_disk:
            raise CheckpointError(f"{where} declares {info.file_size} bytes, past the end of the file")
    for info in infos:
        where = f"checkpoint {npz_path}: entry {info.filename!r}"
        with z.open(info) as f:
            try:
                version = np.lib.format.read_magic(f)
                read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else None
                if version == (2, 0):
                    read_header = np.lib.format.read_array_header_2_0
                if read_header is None:
                    raise ValueError(f"npy format version {version}")
                shape, _, dtype = read_header(f)
            except (ValueError, TypeError, SyntaxError, EOFError) as e:
                raise CheckpointError(f"{where} has no valid .npy header: {e}") from None
            header_length = f.tell()
        if dtype.hasobject or dtype.fields is not None or dtype.kind not in "biuf":
            raise CheckpointError(f"{where} has dtype {dtype}; checkpoints hold plain numbers only")
        declared = math.prod(shape) * dtype.itemsize
        if header_length + declared != info.file_size:
            raise CheckpointError(
                f"{where}: its header declares shape {shape} {dtype} ({declared} bytes), the entry holds "
                f"{info.file_size - header_length} bytes"
            )
        if info.filename == METADATA_ENTRY + ".npy" and declared > MAX_METADATA_BYTES:
            raise CheckpointError(f"{where}: {declared} bytes of metadata, more than {MAX_METADATA_BYTES}")
        headers.append((info, tuple(shape), dtype))
    return headers


def _read_npz(npz_path, before_arrays=None):
    """Every entry of ``npz_path`` as a host array, after :func:`_entry_headers` accepted them all;
    ``before_arrays(metadata entry or None, {name: (shape, dtype)})`` runs once the metadata entry
    is read, before any other entry is (what it raises passes through as it is)."""
    planning = False
    try:
        size_on_disk = os.path.getsize(npz_path)
        with zipfile.ZipFile(npz_path) as z:
            headers = _entry_headers(z, npz_path, size_on_disk)
            metadata_first = sorted(headers, key=lambda header: header[0].filename != METADATA_ENTRY + ".npy")
            arrays = {}
            for info, _, _ in metadata_first:
                name = info.filename[: -len(".npy")]
                if name != METADATA_ENTRY and before_arrays is not None:
                    declared = {i.filename[: -len(".npy")]: (shape, dtype) for i, shape, dtype in headers}
                    declared.pop(METADATA_ENTRY, None)
                    planning = True
                    before_arrays(arrays.get(METADATA_ENTRY), declared)
                    planning, before_arrays = False, None
                with z.open(info) as f:
                    arrays[name] = np.lib.format.read_array(f, allow_pickle=False)
            return arrays
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as e:
        if planning or isinstance(e, CheckpointError):  # a CheckpointError is a ValueError too
            raise
        if isinstance(e, FileNotFoundError):
            raise CheckpointError(f"checkpoint arrays {npz_path} do not exist") from None
        raise CheckpointError(
            f"checkpoint arrays {npz_path} are unreadable (truncated or not an npz written by dispatchrl): {e}"
        ) from None


def _depth(document) -> int:
    """How deep a parsed JSON document nests (iteratively: no recursion to exhaust)."""
    deepest, stack = 0, [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            deepest = max(deepest, depth)
            if depth <= MAX_METADATA_DEPTH:
                stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return deepest


def _parse(text, where):
    if len(text) > MAX_METADATA_BYTES:
        raise CheckpointError(f"checkpoint metadata {where}: {len(text)} bytes, more than {MAX_METADATA_BYTES}")
    try:
        document = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"checkpoint metadata {where} is not valid JSON: {e}") from None
    except RecursionError:
        raise CheckpointError(f"checkpoint metadata {where} nests deeper than JSON parsing allows") from None
    if _depth(document) > MAX_METADATA_DEPTH:
        raise CheckpointError(f"checkpoint metadata {where} nests deeper than {MAX_METADATA_DEPTH} levels")
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise CheckpointError(f"{where} is not a dispatchrl checkpoint (no format: {FORMAT!r})")
    return document


def _metadata_entry(entry: np.ndarray, npz_path: object) -> dict:
    if entry.dtype != np.uint8 or entry.ndim != 1:
        raise CheckpointError(f"{npz_path}: entry {METADATA_ENTRY!r} is not metadata")
    return _parse(entry.tobytes(), npz_path)


def _check_planned(npz_path, declared, expected) -> None:
    """Refuse an entry ``expected`` ({name: (shape, dtype)}, None in a shape: any length) does not
    hold, or holds with another shape or dtype, from its ``.npy`` header (``declared``)."""
    for name, (shape, dtype) in sorted(declared.items()):
        if name not in expected:
            raise CheckpointError(
                f"checkpoint {npz_path}: unexpected entry {name!r} ({shape} {dtype}): this run has none"
            )
        want_shape, want_dtype = expected[name]
        if (
            dtype != np.dtype(want_dtype)
            or len(shape) != len(want_shape)
            or any(want is not None and want != got for want, got in zip(want_shape, shape))
        ):
            raise CheckpointError(
                f"checkpoint {npz_path}: entry {name!r} has shape {shape} {dtype}, expected {want_shape} "
                f"{np.dtype(want_dtype).name}"
            )


def load(path, plan=None):
    """(metadata, arrays) of the newest complete checkpoint at ``path`` (see :func:`latest`),
    migrated to the current version and checked against its digest.

    ``plan(metadata)`` → {name: (shape, dtype)} (None in a shape: any length): for a checkpoint
    of the current version, the entries the caller will accept, from the metadata alone (read
    first, then verified by the digest with the rest); any other entry is refused from its
    header, before it is read. Older versions name entries as they did; their migrations and
    :func:`restore` check them."""
    npz_path = latest(path)

    def before_arrays(entry: np.ndarray | None, declared: dict) -> None:
        if plan is None or entry is None:
            return
        document = _metadata_entry(entry, npz_path)
        if document.get("version") == VERSION:
            _check_planned(npz_path, declared, plan(document))

    arrays = _read_npz(npz_path, before_arrays)
    entry = arrays.pop(METADATA_ENTRY, None)
    if entry is not None:
        document = _metadata_entry(entry, npz_path)
    else:  # version 1 kept its metadata beside the arrays
        json_path = paths(npz_path)[1]
        try:
            if json_path.stat().st_size > MAX_METADATA_BYTES:
                raise CheckpointError(f"checkpoint metadata {json_path} is larger than {MAX_METADATA_BYTES} bytes")
            document = _parse(json_path.read_bytes(), json_path)
        except FileNotFoundError:
            raise CheckpointError(f"checkpoint metadata {json_path} does not exist") from None
    version = document.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version > VERSION or version < 1:
        raise CheckpointError(
            f"{npz_path} has checkpoint version {version!r}, this dispatchrl reads versions 1 to {VERSION}"
        )
    if version >= 2 and document.get("digest") != _digest(document, arrays):
        raise CheckpointError(f"{npz_path}: contents do not match the checkpoint's digest (edited or corrupted)")
    while version < VERSION:
        if version not in MIGRATIONS:
            raise CheckpointError(f"{npz_path}: no migration from checkpoint version {version}")
        document, arrays = MIGRATIONS[version](dict(document), dict(arrays))
        if document.get("version") != version + 1:
            raise CheckpointError(f"migration from checkpoint version {version} did not produce version {version + 1}")
        version += 1
    return document, arrays


@migration(from_version=1)
def _metadata_into_npz(document, arrays):
    """Version 1 → 2: same arrays and fields; the metadata now travels inside the npz."""
    document["version"] = 2
    return document, arrays


def load_metadata(path):
    """The (migrated) metadata of the newest checkpoint at ``path``."""
    return load(path)[0]


# ---------------------------------------------------------------- restoring


class FieldValues:
    """The checkpoint's values for the fields of one struct of the state, handed to its
    ``validate_checkpoint(values, context)``: ``values[name]`` is the host array of field
    ``name``, ``values.scalar(name)`` its single element, and :meth:`require` refuses values
    outside a range with a CheckpointError naming the field's full path."""

    def __init__(self, arrays, prefix, source):
        self.arrays, self.prefix, self.source = arrays, prefix, source

    def __getitem__(self, name):
        return self.arrays[self.prefix + name]

    def __contains__(self, name):
        return self.prefix + name in self.arrays

    def scalar(self, name):
        return self[name].reshape(-1)[0].item()

    def require(self, name, low, high, why=""):
        """Every element of field ``name`` in [low, high]; returns the field's first element."""
        value = self[name]
        bad = (value < low) | (value > high)
        if np.any(bad):
            first = value.reshape(-1)[int(np.argmax(bad.reshape(-1)))].item()
            self.refuse(name, f"= {first} is outside its allowed range [{low}, {high}]" + (f" ({why})" if why else ""))
        return value.reshape(-1)[0].item()

    def refuse(self, name, problem) -> None:
        raise CheckpointError(f"{self.source}: '{self.prefix}{name}' {problem}")


def _owners(tree, prefix=""):
    """(prefix, struct) for every dataclass of the state tree that states checkpoint invariants,
    inner structs first (a field's own range is checked before relations between fields)."""
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        for field in dataclasses.fields(tree):
            if _saved(field):
                yield from _owners(getattr(tree, field.name), f"{prefix}{field.name}.")
        if hasattr(tree, "validate_checkpoint"):
            yield prefix, tree
    elif isinstance(tree, (list, tuple)):
        for i, item in enumerate(tree):
            yield from _owners(item, f"{prefix}{i}.")


def check_values(source: str, name: str, value: np.ndarray, why_non_negative: str) -> None:
    """Refuse (:class:`CheckpointError`) a loaded float array holding NaN or inf, or an integer
    array holding a negative entry (``why_non_negative`` says why none can be)."""
    if value.dtype.kind == "f" and not np.all(np.isfinite(value)):
        raise CheckpointError(f"{source}: '{name}' holds NaN or inf")
    if value.dtype.kind == "i" and np.any(value < 0):
        raise CheckpointError(
            f"{source}: '{name}' = {int(value.min())} is outside its allowed range "
            f"[0, {np.iinfo(value.dtype).max}] ({why_non_negative})"
        )


def restore(state, arrays, source="checkpoint", context=None) -> None:
    """Copy ``arrays`` into the Arrays of ``state``; every leaf must be present with its exact
    shape and dtype, nothing else may be there, floats finite, integers non-negative, and every
    struct's ``validate_checkpoint`` must accept its values (``context``: what the caller knows,
    e.g. ``{"config": ..., "env": ...}``). Validates everything before writing anything."""
    leaves = {name.rstrip("."): arr for name, arr in named_arrays(state)}
    missing = sorted(set(leaves) - set(arrays))
    extra = sorted(set(arrays) - set(leaves))
    if missing or extra:
        raise CheckpointError(f"{source} does not match this run: missing {missing[:5]}, unexpected {extra[:5]}")
    for name, arr in leaves.items():
        value = arrays[name]
        if value.shape != arr.shape or value.dtype != arr.dtype:
            raise CheckpointError(
                f"{source}: '{name}' has shape {value.shape} {value.dtype}, expected {arr.shape} {arr.dtype.name}"
            )
        # every integer leaf is a count, a step or an index: a negative one would index before a
        # buffer or run a loop backwards
        check_values(source, name, value, "counts and indices are never negative")
    arrays = {name: arrays[name] for name in leaves}
    for prefix, owner in _owners(state):
        owner.validate_checkpoint(FieldValues(arrays, prefix, source), dict(context or {}))
    for name, arr in leaves.items():
        assign(arr, arrays[name])
