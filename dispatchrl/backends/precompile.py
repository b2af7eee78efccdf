"""Compile a fused CPU step's kernels on a second core while this process compiles the step.

A cold fused step spends most of its compile time in its kernels, one Numba specialization after
another while the step is typed. A helper process compiles the same (kernel, signature) list in
reverse order into the shared Numba disk cache; when this process reaches a kernel the helper has
finished, Numba loads it from the cache instead of compiling it. The machine code is the same
either way (same source, options and CPU), so results do not change. The helper is stopped as
soon as the step is compiled.

On Linux the helper is a fork of this process: it starts at once, with everything imported and
traced (a new Python process spends about 1.5 s importing dispatchrl before its first job). It
touches nothing but Numba's compiler and cache and leaves by ``os._exit``. The two processes claim
jobs from a shared table (this one from the front, :func:`compile_share`; the helper from the
back), so no kernel is compiled twice and both finish together. Elsewhere the helper is a new
Python process fed the job list.

DISPATCHRL_COMPILE_WORKERS=0 turns it off (default 1 where this process may use at least 2 CPUs).
"""

import contextlib
import os
import pickle
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numba
import numpy as np
from numba import types

from ..arrays import Array
from ..errors import ConfigError
from ..staging import kernel_calls

__all__ = [
    "FORK",
    "MIN_SIGNATURES",
    "ForkedHelper",
    "cold_kernels",
    "compile_share",
    "compile_workers",
    "kernel_progress",
    "kernel_signatures",
    "start_precompile",
    "stop_precompile",
]

#: whether the helper is a fork of this process (Linux: a spawned one would import for ~1.5 s)
FORK = sys.platform.startswith("linux") and hasattr(os, "fork")

#: fewer distinct kernel signatures than this compile faster than a helper process starts (~1.5 s
#: to spawn one; a fork pays from two on, as this process compiles the first itself)
MIN_SIGNATURES = 2 if FORK else 8

# The helper: read the job list, compile each signature (best effort: any failure is left to the
# main process, which compiles what is missing itself).
_HELPER = """
import importlib, pickle, sys
jobs = pickle.load(sys.stdin.buffer)
import dispatchrl.backends.cpu  # points Numba's cache where the parent's is
from dispatchrl.backends.precompile import _disk_cached
for module, name, signature in jobs:
    try:
        target = getattr(importlib.import_module(module), name)
        if signature is None:
            target()
        elif not _disk_cached(target, signature):  # else the parent compiled it meanwhile
            target.compile(signature)
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


def _disk_cached(kernel: Any, signature: tuple) -> bool:
    """Whether Numba's disk cache holds ``kernel`` at ``signature`` (True for a kernel without a
    disk cache: no helper could share its compilation)."""
    cache_file = getattr(getattr(kernel, "_cache", None), "_cache_file", None)
    if cache_file is None:
        return True
    try:
        overloads = cache_file._load_index()  # {} when missing or stale; keys (signature, target, ...)
    except Exception:
        return False
    return any(key[0] == signature for key in overloads)


def cold_kernels(calls: list) -> list[tuple[Any, tuple]]:
    """(kernel, argument types) of each distinct kernel call not compiled or in the disk cache yet,
    in call order; calls whose types cannot be predicted are left out."""
    jobs: dict[tuple, None] = {}
    for kernel, args in kernel_calls(calls):
        signature = tuple(_argument_type(a) for a in args)
        if any(t is None for t in signature):
            continue
        signature = tuple(kernel.fold_argument_types(signature, {})[1])  # a *args kernel's tail as one tuple
        if signature in kernel.overloads or _disk_cached(kernel, signature):
            continue
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


#: a job's entry in the claims table: free, being compiled here or by the helper, finished
FREE, PARENT, HELPER, FINISHED = 0, 1, 2, 3


class ForkedHelper:
    """A forked helper, with the part of ``subprocess.Popen``'s interface the callers use, and the
    job table both processes claim from."""

    def __init__(self, pid: int, jobs: list[tuple[Any, tuple]], claims: Any, lock: Any) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.jobs, self.claims, self.lock = jobs, claims, lock

    def claim(self, index: int, by: int) -> bool:
        """Take job ``index`` for ``by`` (PARENT or HELPER) if it is free."""
        with self.lock:
            if self.claims[index] != FREE:
                return False
            self.claims[index] = by
            return True

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"precompile helper {self.pid}", timeout or 0.0)
            time.sleep(0.005)
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)


def _fork_helper(
    jobs: list[tuple[Any, tuple]],
    prepares: Sequence[Callable[[], None]],
    compiling: Callable[[], contextlib.AbstractContextManager],
) -> ForkedHelper | None:
    # Python 3.12+ warns that forking a threaded process may deadlock the child (a lock held by
    # another thread stays held); this child uses no lock those threads take (not the progress
    # display's streams: its own are /dev/null), and is killed with the step compiled anyway.
    import multiprocessing

    try:  # the job table, shared with the child (a semaphore and an anonymous shared mapping)
        fork = multiprocessing.get_context("fork")  # an unnamed semaphore: no resource tracker
        lock, claims = fork.Lock(), fork.RawArray("b", len(jobs))
    except OSError:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            pid = os.fork()
        except OSError:
            return None
    helper = ForkedHelper(pid, jobs, claims, lock)
    if pid:
        return helper
    code = 1
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C stops the parent, which kills this
        sys.stdin = sys.stdout = sys.stderr = open(os.devnull, "r+")
        for prepare in prepares:
            prepare()
        with compiling():  # as the parent compiles them, so the cached code is the same
            for index in reversed(range(len(jobs))):
                if not helper.claim(index, HELPER):
                    continue
                kernel, signature = jobs[index]
                try:
                    kernel.compile(signature)
                except Exception:
                    pass  # left to the parent, which compiles what is missing itself
                claims[index] = FINISHED
        code = 0
    finally:
        os._exit(code)


def compile_share(helper: subprocess.Popen | ForkedHelper | None) -> None:
    """This process's part of a forked helper's jobs: claim and compile them from the front, then
    wait for the ones the helper took (they are then in the disk cache; a helper that died leaves
    its unfinished ones to this process's own compile). Nothing for other helpers."""
    if not isinstance(helper, ForkedHelper):
        return
    for index, (kernel, signature) in enumerate(helper.jobs):
        if helper.claim(index, PARENT):
            try:
                kernel.compile(signature)
            except Exception:
                pass  # compiled (and its error raised) where the step uses it
    while HELPER in helper.claims[:] and helper.poll() is None:
        time.sleep(0.002)


def start_precompile(
    calls: list,
    prepares: Sequence[Callable[[], None]] = (),
    compiling: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
) -> subprocess.Popen | ForkedHelper | None:
    """Start the helper running ``prepares`` (module-level functions, see
    ``cpu.before_first_run``), then compiling ``calls``' kernels (last first) inside
    ``compiling()`` (a forked helper: the Numba settings this process compiles them under; a new
    process gets NUMBA_OPT=1); None when it would not pay."""
    if compile_workers() == 0:
        return None
    if FORK:
        cold = cold_kernels(calls)
        return _fork_helper(cold, prepares, compiling) if len(cold) >= MIN_SIGNATURES else None
    jobs = kernel_signatures(calls)
    if len(jobs) < MIN_SIGNATURES:
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


def stop_precompile(helper: subprocess.Popen | ForkedHelper | None) -> None:
    """Stop the helper (its remaining jobs are compiled or loaded already)."""
    if helper is not None and helper.poll() is None:
        helper.kill()
        helper.wait()
