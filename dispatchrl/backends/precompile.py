"""Compile a fused CPU step's kernels on a second core while this process compiles the step.

A cold fused step spends most of its compile time in its kernels, one Numba specialization after
another while the step is typed. A helper process compiles the same (kernel, signature) list in
reverse order into the shared Numba disk cache; when this process reaches a kernel the helper has
finished, Numba loads it from the cache instead of compiling it. The machine code is the same
either way (same source, options and CPU), so results do not change. The helper is stopped as
soon as the step is compiled.

DISPATCHRL_COMPILE_WORKERS=0 turns it off (default 1 where this process may use at least 2 CPUs).
"""

import os
import pickle
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numba
import numpy as np
from numba import types

from ..arrays import Array
from ..errors import ConfigError
from ..staging import kernel_calls

__all__ = [
    "MIN_SIGNATURES",
    "cold_kernels",
    "compile_workers",
    "kernel_progress",
    "kernel_signatures",
    "start_precompile",
    "stop_precompile",
]

#: fewer distinct kernel signatures than this compile faster than a helper process starts (~1.5 s)
MIN_SIGNATURES = 8

# The helper: read the job list, compile each signature (best effort: any failure is left to the
# main process, which compiles what is missing itself).
_HELPER = """
import importlib, pickle, sys
jobs = pickle.load(sys.stdin.buffer)
import dispatchrl.backends.cpu  # points Numba's cache where the parent's is
for module, name, signature in jobs:
    try:
        target = getattr(importlib.import_module(module), name)
        target() if signature is None else target.compile(signature)
    except Exception:
        pass
"""


def compile_workers() -> int:
    """Helper processes per cold fused step: DISPATCHRL_COMPILE_WORKERS, default 1 with >= 2 CPUs."""
    setting = os.environ.get("DISPATCHRL_COMPILE_WORKERS", "").strip()
    if not setting:  # unset or empty: the default
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        return 1 if cpus >= 2 else 0
    if not setting.isdigit() or int(setting) > 1:
        raise ConfigError(f"DISPATCHRL_COMPILE_WORKERS must be 0 or 1, got {setting!r}")
    return int(setting)


def _argument_type(value: object) -> Any:
    """The Numba type a fused step's source gives this kernel argument (None: not predictable)."""
    if isinstance(value, Array):
        return numba.typeof(value.data)
    if isinstance(value, (bool, np.bool_)):
        return types.literal(bool(value))
    if isinstance(value, (int, np.integer)):
        return types.int64 if -(2**63) <= int(value) < 2**63 else None
    if isinstance(value, (float, np.floating)):
        return types.float64
    if value is None:
        return types.none
    return None


def _disk_cached(kernel: Any) -> bool:
    """Whether Numba's disk cache holds some specialization of ``kernel`` (its index exists)."""
    cache = getattr(kernel, "_cache", None)
    index = getattr(getattr(cache, "_cache_file", None), "_index_path", None)
    return index is None or os.path.exists(index)


def cold_kernels(calls: list) -> list[tuple[Any, tuple]]:
    """(kernel, argument types) of each distinct kernel call not in the disk cache yet, in call
    order; calls whose types cannot be predicted are left out."""
    jobs: dict[tuple, None] = {}
    for kernel, args in kernel_calls(calls):
        signature = tuple(_argument_type(a) for a in args)
        if any(t is None for t in signature) or _disk_cached(kernel) or signature in kernel.overloads:
            continue  # (in memory already: a kernel without a disk cache this process compiled)
        jobs[(kernel, signature)] = None
    return list(jobs)


def kernel_signatures(calls: list) -> list[tuple[str, str, tuple]]:
    """(module, name, argument types) of each :func:`cold_kernels` call, for the helper."""
    return [(k.py_func.__module__, k.py_func.__name__, signature) for k, signature in cold_kernels(calls)]


def kernel_progress(jobs: list[tuple[Any, tuple]]) -> Callable[[], tuple[int, int]]:
    """A probe for ``staging.compile_activity``: (how many of ``jobs``, from
    :func:`cold_kernels`, are compiled or loaded now, how many there are). It counts each
    kernel's specializations added since the probe was made (at most its jobs), so a signature
    Numba spells differently from the prediction still counts."""
    wanted: dict[Any, int] = {}
    for kernel, _ in jobs:
        wanted[kernel] = wanted.get(kernel, 0) + 1
    before = {kernel: len(kernel.overloads) for kernel in wanted}

    def probe() -> tuple[int, int]:
        done = sum(min(len(k.overloads) - before[k], n) for k, n in wanted.items())
        return done, len(jobs)

    return probe


def start_precompile(calls: list, prepares: Sequence[Callable[[], None]] = ()) -> subprocess.Popen | None:
    """Start the helper running ``prepares`` (module-level functions, see
    ``cpu.before_first_run``), then compiling ``calls``' kernels (last first); None when it would
    not pay."""
    jobs = kernel_signatures(calls)
    if compile_workers() == 0 or len(jobs) < MIN_SIGNATURES:
        return None
    first: list[tuple[str, str, tuple | None]] = [(p.__module__, p.__qualname__, None) for p in prepares]
    config: Any = numba.config
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    # the same dispatchrl (so the same source hash) and the same Numba cache parent
    env["PYTHONPATH"] = package_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["NUMBA_CACHE_DIR"] = os.path.dirname(config.CACHE_DIR)
    env.setdefault("NUMBA_OPT", "1")  # as cpu.step_opt_level compiles them in this process
    try:
        helper = subprocess.Popen(
            [sys.executable, "-c", _HELPER],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        assert helper.stdin is not None
        helper.stdin.write(pickle.dumps(first + jobs[::-1]))
        helper.stdin.close()
    except OSError:
        return None  # an optimisation only
    return helper


def stop_precompile(helper: subprocess.Popen | None) -> None:
    """Stop the helper (its remaining jobs are compiled or loaded already)."""
    if helper is not None and helper.poll() is None:
        helper.kill()
        helper.wait()
