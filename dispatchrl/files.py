"""Atomic file writes: a reader (another process, or this one after a crash) sees the whole old
file or the whole new one, never a part. Every file dispatchrl may replace while another process
reads it (checkpoints, TensorDict metadata, the cache's generated modules and compile times, sweep
results) is written by :func:`atomic_write`; files written once into a new folder (exports, logs)
and the C compiler's libraries (built in a private folder, then renamed) are not.

The temporary is ``.<target's name>.<writer's pid>.<random>.tmp`` in the target's own folder (a
rename is atomic only within one file system): unique per writer, so concurrent writers of one
target never write into each other's temporary (the last rename wins, whole), and the pid tells a
later run a killed writer's leftovers from a live writer's file
(:func:`dispatchrl.checkpoint.remove_stale_temporaries`).
"""

import errno
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

__all__ = ["atomic_write", "atomic_write_text"]


def _fsync_directory(directory: str | os.PathLike) -> None:
    """Make a rename in ``directory`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # e.g. platforms that cannot open directories
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(target: str | os.PathLike, write: Callable[[IO[bytes]], Any], mode: int = 0o666) -> None:
    """``write(file)`` into a unique temporary beside ``target`` (a binary file), fsync it, rename
    it over ``target``, fsync the folder. The file gets ``mode`` less the umask, as ``open`` gives.
    Any failure (an OSError of a full disk, or whatever ``write`` raises) removes the temporary,
    leaves ``target`` as it was and propagates."""
    target = Path(target)
    tmp, fd = _create_temporary(target, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_directory(target.parent)


def _create_temporary(target: Path, mode: int) -> tuple[Path, int]:
    """A new file ``.<name>.<pid>.<random>.tmp`` beside ``target``, opened for writing (``mkstemp``
    would do, but always with mode 0o600)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    for _ in range(100):
        tmp = target.parent / f".{target.name}.{os.getpid()}.{secrets.token_hex(6)}.tmp"
        try:
            return tmp, os.open(tmp, flags, mode)
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no unused temporary name", str(target))


def atomic_write_text(target: str | os.PathLike, text: str, mode: int = 0o666) -> None:
    """:func:`atomic_write` of ``text``, encoded as UTF-8."""
    data = text.encode()
    atomic_write(target, lambda f: f.write(data), mode)
