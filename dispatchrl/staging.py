"""Staged dispatch: resolve a sequence of generic-function calls once, run it compiled many times.

Device methods never compute directly; they call :func:`launch` with a kernel and its arguments.
Called eagerly, ``launch`` runs the kernel at once. Inside :func:`fuse`, it records the call
instead, so tracing a step function once yields the flat list of (kernel, arguments) with all
plum dispatch and validation already done. :func:`compile_step` (a generic function itself)
turns that list into something runnable for the device: on CPU one generated ``@njit`` function
that loops ``n`` times over the kernel calls, cached on disk by a hash of its source and of every
kernel source it depends on (so it never goes stale); on Generic and CUDA a prepared loop of
calls/launches with the arrays already unwrapped.
"""

import atexit
import contextvars
import functools
import hashlib
import importlib.util
import math
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import plum

from .arrays import Array
from .devices import CPU, CUDA, Generic
from .errors import ConfigError

__all__ = ["launch", "fuse", "when", "Every", "Below", "compile_step", "Step", "cache_dir"]

_recording = contextvars.ContextVar("dispatchrl_recording", default=None)
_dispatch = plum.Dispatcher()


def _raw(x):
    return x.data if isinstance(x, Array) else x


def launch(device, kernel, *args):
    """Run ``kernel(*raw args)`` now, or record it while a step is being staged by :func:`fuse`."""
    calls = _recording.get()
    if calls is not None:
        calls.append((kernel, args))
        return
    kernel(*[_raw(a) for a in args])


class Every:
    """Condition ``counter[0] % period == offset`` on an int64 (1,) counter Array."""

    def __init__(self, counter, period, offset=0):
        _check_counter(counter)
        if int(period) < 1 or not 0 <= int(offset) < int(period):
            raise ConfigError(f"Every: need period >= 1 and 0 <= offset < period, got {period}, {offset}")
        self.counter, self.period, self.offset = counter, int(period), int(offset)

    def holds(self, count):
        return count % self.period == self.offset

    def expression(self, name):
        return f"{name}[0] % {self.period} == {self.offset}"


class Below:
    """Condition ``counter[0] < limit`` on an int64 (1,) counter Array."""

    def __init__(self, counter, limit):
        _check_counter(counter)
        self.counter, self.limit = counter, int(limit)

    def holds(self, count):
        return count < self.limit

    def expression(self, name):
        return f"{name}[0] < {self.limit}"


def _check_counter(counter):
    if not (isinstance(counter, Array) and counter.shape == (1,) and counter.dtype == np.int64):
        raise ConfigError(f"a staged condition needs an int64 Array of shape (1,) as counter, got {counter!r}")


class Branch:
    """A staged ``if``: ``then`` and ``otherwise`` are lists of recorded calls (and branches)."""

    def __init__(self, condition):
        self.condition, self.then, self.otherwise = condition, [], []


def when(device, condition, then, otherwise=None):
    """``then(device)`` if ``condition`` holds, else ``otherwise(device)``: evaluated now when
    called eagerly; inside :func:`fuse`, both branches are traced and the test runs in the step."""
    calls = _recording.get()
    if calls is None:
        branch = then if condition.holds(int(_raw(condition.counter)[0])) else otherwise
        if branch is not None:
            branch(device)
        return
    node = Branch(condition)
    calls.append(node)
    for target, fn in ((node.then, then), (node.otherwise, otherwise)):
        if fn is not None:
            token = _recording.set(target)
            try:
                fn(device)
            finally:
                _recording.reset(token)


def _kernel_calls(nodes):
    for node in nodes:
        if isinstance(node, Branch):
            yield from _kernel_calls(node.then)
            yield from _kernel_calls(node.otherwise)
        else:
            yield node


class Step:
    """A staged step: ``step()`` runs it once, ``step(n)`` n times (on CPU in one compiled call)."""

    def __init__(self, device, run, calls, compile_seconds):
        self.device = device
        self._run = run
        self.calls = calls
        self.compile_seconds = compile_seconds

    def __call__(self, n=1):
        self._run(int(n))

    @property
    def kernel_calls(self):
        """Every recorded (kernel, args), both sides of every branch included."""
        return list(_kernel_calls(self.calls))

    def __repr__(self):
        return f"<Step on {self.device!r}: {len(self.kernel_calls)} kernel calls>"


def fuse(device, fn, *args, **kwargs):
    """Trace ``fn(device, *args, **kwargs)`` once and compile it into a :class:`Step`.

    ``fn`` must be a sequence of generic-function calls on persistent arrays (outputs passed in),
    with data-dependent control flow expressed by :func:`when`; nothing executes while tracing,
    so it must not read array values.
    """
    calls = []
    token = _recording.set(calls)
    try:
        fn(device, *args, **kwargs)
    finally:
        _recording.reset(token)
    start = time.perf_counter()
    run = compile_step(device, calls)
    return Step(device, run, calls, time.perf_counter() - start)


@_dispatch
def compile_step(device: Generic, calls: list):
    return _python_program(calls)


@_dispatch
def compile_step(device: CUDA, calls: list):  # noqa: F811
    return _python_program(calls)


@_dispatch
def compile_step(device: CPU, calls: list):  # noqa: F811
    if all(_is_numba(kernel) for kernel, _ in _kernel_calls(calls)):
        return _njit_program(calls)
    if any(isinstance(node, Branch) for node in calls):
        return _python_program(calls)
    # Consecutive Numba kernels fuse into njit segments; anything else (a Generic fallback
    # method) runs from Python between them.
    segments, current = [], []
    for kernel, args in calls:
        if _is_numba(kernel):
            current.append((kernel, args))
        else:
            if current:
                segments.append(_njit_program(current))
                current = []
            segments.append(_python_program([(kernel, args)]))
    if current:
        segments.append(_njit_program(current))

    def run(n):
        for _ in range(n):
            for segment in segments:
                segment(1)

    return run


def _python_program(calls):
    """Prepared closures over raw arrays; branches read their counter (for CUDA, a small copy)."""

    def prepare(nodes):
        ops = []
        for node in nodes:
            if isinstance(node, Branch):
                counter, holds = _raw(node.condition.counter), node.condition.holds
                then, otherwise = prepare(node.then), prepare(node.otherwise)

                def op(counter=counter, holds=holds, then=then, otherwise=otherwise):
                    for inner in (then if holds(int(counter[0])) else otherwise):
                        inner()

                ops.append(op)
            else:
                kernel, args = node
                ops.append(functools.partial(kernel, *[_raw(a) for a in args]))
        return ops

    ops = prepare(calls)

    def run(n):
        for _ in range(n):
            for op in ops:
                op()

    return run


def _is_numba(kernel):
    from numba.core.dispatcher import Dispatcher

    return isinstance(kernel, Dispatcher)


_usable_cache_dirs = {}


def cache_dir():
    """Where generated sources (and their Numba caches) live; DISPATCHRL_CACHE_DIR overrides.

    A directory that cannot be created or written (read-only, or a path below a file) gives way,
    with a warning, to a temporary one for this process: caching is an optimisation, never a
    reason to fail. Processes sharing one directory are safe: every file in it is written under
    a temporary name and renamed into place.
    """
    root = Path(os.environ.get("DISPATCHRL_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "dispatchrl"))
    if root not in _usable_cache_dirs:
        _usable_cache_dirs[root] = _writable_or_temporary(root)
    return _usable_cache_dirs[root]


def _writable_or_temporary(root):
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=root, prefix=".write-test-")
        os.close(fd)
        os.unlink(probe)
        return root
    except OSError as e:
        fallback = Path(tempfile.mkdtemp(prefix="dispatchrl-cache-"))
        atexit.register(shutil.rmtree, fallback, ignore_errors=True)
        warnings.warn(f"dispatchrl cache directory {root} is not writable ({e.strerror or e}); compiled kernels "
                      f"are cached in {fallback} for this process only (set DISPATCHRL_CACHE_DIR to a writable "
                      "directory to keep them)", RuntimeWarning, stacklevel=3)
        return fallback


def _literal(value):
    if isinstance(value, (bool, np.bool_)):
        return repr(bool(value))
    if isinstance(value, (int, np.integer)):
        return repr(int(value))
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return repr(value) if math.isfinite(value) else f"float({str(value)!r})"
    if value is None:
        return "None"
    raise ConfigError(f"cannot stage a kernel argument of type {type(value).__name__}: "
                      "pass Arrays or plain numbers")


_fingerprints = {}


def _module_fingerprint(module_name):
    """Hash of a module's source file (memoised per process)."""
    if module_name not in _fingerprints:
        path = getattr(sys.modules.get(module_name), "__file__", None)
        _fingerprints[module_name] = hashlib.sha256(Path(path).read_bytes()).hexdigest() if path else ""
    return _fingerprints[module_name]


def _package_fingerprint():
    # Kernels may call helpers from other dispatchrl modules, which Numba's own cache check would
    # not notice: hash the whole package source, so no edit can leave a stale fused step.
    if "<package>" not in _fingerprints:
        digest = hashlib.sha256()
        for path in sorted(Path(__file__).parent.rglob("*.py")):
            digest.update(path.read_bytes())
        _fingerprints["<package>"] = digest.hexdigest()
    return _fingerprints["<package>"]


def _configure_numba_cache():
    """Put Numba's disk cache in a folder named by the hash of dispatchrl's sources.

    Numba checks only the timestamp of a kernel's own file, so a kernel calling a helper from
    another module (or a fused step embedding both) could load stale machine code after the
    helper changed. A per-source-hash folder makes any edit start a fresh cache.
    NUMBA_CACHE_DIR, if set, is the parent of that folder.
    """
    import numba

    base = numba.config.CACHE_DIR or str(cache_dir() / "numba")
    numba.config.CACHE_DIR = os.path.join(base, f"dispatchrl-{_package_fingerprint()[:16]}")


_configure_numba_cache()  # before any kernel module is imported: Numba reads it at decoration


def _importable(kernel):
    module = sys.modules.get(kernel.py_func.__module__)
    return (module is not None and module.__name__ != "__main__"
            and getattr(module, kernel.py_func.__name__, None) is kernel)


def _njit_program(calls):
    kernels, arrays = {}, {}

    def array_name(a):
        return arrays.setdefault(id(a.data), (f"a{len(arrays)}", a.data))[0]

    def render(nodes, indent):
        lines = []
        for node in nodes:
            if isinstance(node, Branch):
                lines.append(f"{indent}if {node.condition.expression(array_name(node.condition.counter))}:")
                lines += render(node.then, indent + "    ") or [indent + "    pass"]
                if node.otherwise:
                    lines.append(f"{indent}else:")
                    lines += render(node.otherwise, indent + "    ")
            else:
                kernel, args = node
                name = kernels.setdefault(kernel, f"k{len(kernels)}")
                rendered = [array_name(a) if isinstance(a, Array) else _literal(a) for a in args]
                lines.append(f"{indent}{name}({', '.join(rendered)})")
        return lines

    body = render(calls, "        ")
    params = ", ".join(name for name, _ in arrays.values())
    raw = [data for _, data in arrays.values()]
    cacheable = all(_importable(k) for k in kernels)
    imports = [f"from {k.py_func.__module__} import {k.py_func.__name__} as {name}"
               for k, name in kernels.items()] if cacheable else []
    from .kernels import cpu

    # The loop allocates nothing; without Numba's runtime each kernel call skips an incref/decref
    # call pair per array argument (100 calls: 6.3 -> 2.9 µs). Callees that do not set ``_nrt``
    # inherit the caller's, so only kernels that pin it on (cpu.PIN_RUNTIME: dispatchrl's) allow it.
    pinned = all(k.targetoptions.get("_nrt") for k in (*kernels, cpu.flush_denormals_enter))
    runtime = not (cpu.PIN_RUNTIME and pinned)
    # The loop runs with denormals flushed, as code built with -ffast-math does (see kernels.cpu).
    flush = cpu.FLUSH_DENORMALS
    enter, exit_ = cpu.flush_denormals_enter, cpu.flush_denormals_exit
    if flush and cacheable:
        imports.append("from dispatchrl.kernels.cpu import flush_denormals_enter, flush_denormals_exit")
    source = "\n".join([
        "# generated by dispatchrl.staging: one fused step, do not edit",
        "from numba import njit",
        *imports,
        "",
        "",
        f"@njit(cache={cacheable}, nogil=True{'' if runtime else ', _nrt=False'})",
        f"def fused_step(n{', ' if params else ''}{params}):",
        *(["    fp_mode = flush_denormals_enter()"] if flush else []),
        "    for _ in range(n):",
        *(body or ["        pass"]),
        *(["    flush_denormals_exit(fp_mode)"] if flush else []),
        "",
    ])
    if cacheable:
        fused = _load_cached(source, {k.py_func.__module__ for k in kernels})
    else:
        namespace = {name: k for k, name in kernels.items()}
        namespace.update(flush_denormals_enter=enter, flush_denormals_exit=exit_)
        exec(compile(source, "<dispatchrl fused step>", "exec"), namespace)
        fused = namespace["fused_step"]
    fused(0, *raw)  # compile (or load from the disk cache) now, not on the first real call

    def run(n):
        fused(n, *raw)

    return run


def _load_cached(source, kernel_modules):
    digest = hashlib.sha256(source.encode())
    digest.update(_package_fingerprint().encode())
    for module_name in sorted(kernel_modules):
        digest.update(_module_fingerprint(module_name).encode())
    name = f"fused_{digest.hexdigest()[:24]}"
    directory = cache_dir() / "fused"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.py"
    if not path.exists():
        tmp = directory / f".{name}.{os.getpid()}.tmp"
        tmp.write_text(source)
        os.replace(tmp, path)  # atomic: concurrent processes never see half a file
    module_name = f"dispatchrl_fused.{name}"
    module = sys.modules.get(module_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return module.fused_step
