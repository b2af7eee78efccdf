"""The on-disk cache of generated code: where it lives, the source fingerprints its keys are made
of, and the atomic "write a generated module and import it" step.

Keys are hashes of sources, never timestamps: a fused step or a Numba cache built from one version
of dispatchrl can never be loaded by another.
"""

import atexit
import functools
import hashlib
import importlib.util
import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path
from types import ModuleType

from .files import atomic_write_text

__all__ = [
    "cache_dir",
    "import_generated",
    "module_fingerprint",
    "overflow_dir",
    "package_fingerprint",
    "warn_once",
]

_fingerprints: dict[str, str] = {}
_usable_cache_dirs: dict[Path, Path] = {}
_warned: set[str] = set()
#: bytes the writability probe writes: a full disk refuses them (an empty file it would still make)
PROBE_BYTES = 4096


def warn_once(kind: str, message: str) -> None:
    """A RuntimeWarning about the cache, once per process and ``kind``: a damaged or full cache
    costs compile time, never the run."""
    if kind not in _warned:
        _warned.add(kind)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def cache_dir() -> Path:
    """Where generated sources (and their Numba caches) live; DISPATCHRL_CACHE_DIR overrides.

    A directory that cannot be created or written (read-only, a path below a file, a full disk)
    gives way, with a warning, to a temporary one for this process: caching is an optimisation,
    never a reason to fail. Processes sharing one directory are safe: every file in it is written under
    a temporary name and renamed into place.
    """
    root = Path(
        os.environ.get("DISPATCHRL_CACHE_DIR")
        or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "dispatchrl")
    )
    if root not in _usable_cache_dirs:
        _usable_cache_dirs[root] = _writable_or_temporary(root)
    return _usable_cache_dirs[root]


def _writable_or_temporary(root: Path) -> Path:
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=root, prefix=".write-test-")
        try:
            os.write(fd, bytes(PROBE_BYTES))
        finally:
            os.close(fd)
            os.unlink(probe)
        return root
    except OSError as e:
        fallback = _temporary_cache_dir()
        warnings.warn(
            f"dispatchrl cache directory {root} is not writable ({e.strerror or e}); compiled kernels "
            f"are cached in {fallback} for this process only (set DISPATCHRL_CACHE_DIR to a writable "
            "directory to keep them)",
            RuntimeWarning,
            stacklevel=3,
        )
        return fallback


@functools.cache
def overflow_dir() -> Path:
    """This process's temporary folder for generated code its cache has no room for (a full
    disk), removed at exit."""
    return _temporary_cache_dir()


def _temporary_cache_dir() -> Path:
    fallback = Path(tempfile.mkdtemp(prefix="dispatchrl-cache-"))
    atexit.register(shutil.rmtree, fallback, ignore_errors=True)
    return fallback


def module_fingerprint(module_name: str) -> str:
    """Hash of a loaded module's source file (memoised per process); "" for one without a file."""
    if module_name not in _fingerprints:
        path = getattr(sys.modules.get(module_name), "__file__", None)
        _fingerprints[module_name] = hashlib.sha256(Path(path).read_bytes()).hexdigest() if path else ""
    return _fingerprints[module_name]


def package_fingerprint() -> str:
    """Hash of every source file of dispatchrl (memoised per process).

    Kernels may call helpers from other dispatchrl modules, which Numba's own cache check would
    not notice: keys built on the whole package source let no edit leave stale machine code."""
    if "<package>" not in _fingerprints:
        digest = hashlib.sha256()
        for path in sorted(Path(__file__).parent.rglob("*.py")):
            digest.update(path.read_bytes())
        _fingerprints["<package>"] = digest.hexdigest()
    return _fingerprints["<package>"]


def import_generated(source: str, name: str, folder: str, package: str) -> ModuleType:
    """Write ``source`` to ``cache_dir()/folder/name.py`` (once, atomically: concurrent processes
    never see half a file) and import it as module ``package.name`` (once per process). ``name``
    must identify ``source``, e.g. contain its hash."""
    module_name = f"{package}.{name}"
    path = cache_dir() / folder / f"{name}.py"
    try:  # also when imported already: the cache folder may have changed (DISPATCHRL_CACHE_DIR)
        path = _written(path, source)
    except OSError as e:  # a full disk: a temporary folder for this process
        path = _written(overflow_dir() / folder / f"{name}.py", source)
        warn_once(
            "write",
            f"dispatchrl could not write {path.name} into its cache {cache_dir()} ({e.strerror or e}); "
            f"generated code goes to {path.parent} for this process only",
        )
    module = sys.modules.get(module_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(module_name, path)
        assert spec is not None and spec.loader is not None  # a .py file path always has both
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return module


def _written(path: Path, source: str) -> Path:
    """``path`` holding exactly ``source``: written (under a temporary name, then renamed) when
    missing, rewritten with a warning when damaged (a truncated or edited file: its name is its
    source's hash, so any other content is damage)."""
    try:
        if path.read_text() == source:
            return path
        warn_once(
            "damaged",
            f"dispatchrl: the cached generated module {path} is damaged (not the source it is named "
            "for); discarded and written again",
        )
    except FileNotFoundError:
        pass
    except (OSError, UnicodeDecodeError) as e:
        warn_once("damaged", f"dispatchrl: the cached generated module {path} is unreadable ({e}); written again")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, source)
    return path
