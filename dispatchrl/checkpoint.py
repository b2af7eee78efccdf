"""Checkpoints as ``.npz`` (arrays, loaded with ``allow_pickle=False``) plus ``.json`` (metadata).

A training state is a tree of dataclasses and lists whose leaves are Arrays; every leaf is saved
under its path (``actor.weights.0.m``), so a checkpoint holds weights, optimizer moments, replay
buffer, RNG streams, env state and counters: everything needed to continue bit for bit. Loading
checks every name, shape and dtype against a freshly built state before touching it.
"""

import dataclasses
import json
import os
import zipfile
from pathlib import Path

import numpy as np

from .arrays import Array, assign, to_numpy
from .errors import CheckpointError

FORMAT = "dispatchrl-checkpoint"
VERSION = 1


def named_arrays(tree, prefix=""):
    """(path, Array) for every Array leaf of a tree of dataclasses, lists and tuples, except under
    fields marked ``metadata={"checkpoint": False}`` (storage the other leaves are views of)."""
    if isinstance(tree, Array):
        yield prefix, tree
    elif dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        for field in dataclasses.fields(tree):
            if field.metadata.get("checkpoint", True):
                yield from named_arrays(getattr(tree, field.name), f"{prefix}{field.name}.")
    elif isinstance(tree, (list, tuple)):
        for i, item in enumerate(tree):
            yield from named_arrays(item, f"{prefix}{i}.")


def paths(path):
    """``run`` / ``run.npz`` / ``run.json`` → (run.npz, run.json)."""
    path = Path(path)
    stem = path.with_suffix("") if path.suffix in (".npz", ".json") else path
    return stem.with_name(stem.name + ".npz"), stem.with_name(stem.name + ".json")


def save(path, state, metadata):
    """Write the state's arrays and the JSON metadata next to each other (atomically each)."""
    npz_path, json_path = paths(path)
    npz_path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {name.rstrip("."): to_numpy(arr) for name, arr in named_arrays(state)}
    tmp = npz_path.with_name(npz_path.name + ".tmp")
    with open(tmp, "wb") as f:
        np.savez(f, **arrays)
    os.replace(tmp, npz_path)
    document = {"format": FORMAT, "version": VERSION, **metadata}
    tmp = json_path.with_name(json_path.name + ".tmp")
    tmp.write_text(json.dumps(document, indent=2, sort_keys=True))
    os.replace(tmp, json_path)
    return npz_path, json_path


def load_metadata(path):
    """The JSON metadata of a checkpoint, checked for format and version."""
    _, json_path = paths(path)
    try:
        document = json.loads(json_path.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint metadata {json_path} does not exist") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"checkpoint metadata {json_path} is not valid JSON: {e}") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise CheckpointError(f"{json_path} is not a dispatchrl checkpoint (no format: {FORMAT!r})")
    if document.get("version") != VERSION:
        raise CheckpointError(f"{json_path} has checkpoint version {document.get('version')!r}, "
                              f"this dispatchrl reads version {VERSION}")
    return document


def load_arrays(path):
    """All arrays of a checkpoint as host numpy arrays (never unpickles anything)."""
    npz_path, _ = paths(path)
    try:
        with np.load(npz_path, allow_pickle=False) as data:
            return {name: data[name] for name in data.files}
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint arrays {npz_path} do not exist") from None
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as e:
        raise CheckpointError(f"checkpoint arrays {npz_path} are unreadable (truncated or not an "
                              f"npz written by dispatchrl): {e}") from None


def restore(state, arrays, source="checkpoint"):
    """Copy ``arrays`` into the Arrays of ``state``; every leaf must be present with its exact
    shape and dtype, and nothing else may be there. Validates everything before writing."""
    leaves = {name.rstrip("."): arr for name, arr in named_arrays(state)}
    missing = sorted(set(leaves) - set(arrays))
    extra = sorted(set(arrays) - set(leaves))
    if missing or extra:
        raise CheckpointError(f"{source} does not match this run: missing {missing[:5]}, unexpected {extra[:5]}")
    for name, arr in leaves.items():
        value = arrays[name]
        if value.shape != arr.shape or value.dtype != arr.dtype:
            raise CheckpointError(f"{source}: '{name}' has shape {value.shape} {value.dtype}, "
                                  f"expected {arr.shape} {arr.dtype.name}")
        if value.dtype.kind == "f" and not np.all(np.isfinite(value)):
            raise CheckpointError(f"{source}: '{name}' holds NaN or inf")
    for name, arr in leaves.items():
        assign(arr, arrays[name])
