"""The CPU runtime: Numba's options and disk cache, BLAS threads, denormal flushing, and
``compile_step(CPU)``.

Every CPU kernel is a module-level ``@njit(**JIT_FAST)`` or ``@njit(**JIT_EXACT)`` function over
raw contiguous arrays, so the fused step generated here can import and inline it, and Numba's disk
cache keeps it across processes. A traced step becomes one generated ``@njit`` function looping
``n`` times over the kernel calls, written to the cache folder under a hash of its source and of
every source it depends on (so it never goes stale).
"""

import contextlib
import contextvars
import functools
import hashlib
import os
import platform
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numba
import numba.core.caching
import numba.core.codegen
import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils, sigutils
from numba.core.cpu import CPUTargetOptions
from numba.core.dispatcher import Dispatcher
from numba.extending import intrinsic

from ..arrays import Array
from ..cache import cache_dir, import_generated, module_fingerprint, package_fingerprint, warn_once
from ..devices import CPU
from ..errors import ConfigError
from ..staging import (
    Branch,
    Program,
    compile_activity,
    compile_step,
    compiling_steps,
    grouped_arguments,
    kernel_calls,
    python_program,
    python_source,
    segmented_program,
)
from .precompile import (
    ForkedHelper,
    cold_kernels,
    compile_share,
    kernel_progress,
    start_precompile,
    stop_precompile,
)

__all__ = [
    "FLUSH_DENORMALS",
    "JIT_EXACT",
    "JIT_EXACT_INLINED",
    "JIT_EXACT_INNER",
    "JIT_EXACT_THREADED",
    "JIT_FAST",
    "JIT_FAST_INNER",
    "NO_CFUNC",
    "PIN_RUNTIME",
    "RUNTIME_SCALARS",
    "THREADED_FROM",
    "batch_kernel",
    "before_first_run",
    "blas_core_types",
    "configure_numba_cache",
    "env_threads",
    "flush_denormals_enter",
    "flush_denormals_exit",
    "guard_numba_cache",
    "is_numba",
    "is_runtime_scalar",
    "lanes_reduce",
    "lanes_total",
    "limit_blas_threads",
    "njit_program",
    "one_lane",
    "per_index",
    "trim_heap",
    "vector_fma_widths",
]

#: Kernels pin Numba's runtime on, so a fused step calling them may run without it (see
#: njit_program); a Numba without the (internal) option keeps the runtime everywhere.
PIN_RUNTIME: dict[str, Any] = {"_nrt": True} if hasattr(CPUTargetOptions, "_nrt") else {}
#: Numba builds a C-ABI ("cfunc") wrapper beside every compiled function, for first-class function
#: use, which dispatchrl never makes: its IR, optimisation and machine code were ~5% of a cold
#: compile, and a fused step's (every array unpacked) a fifth of its serial compile (NOTES.md).
NO_CFUNC: dict[str, Any] = {"no_cfunc_wrapper": True} if hasattr(CPUTargetOptions, "no_cfunc_wrapper") else {}
#: Arithmetic kernels. error_model="numpy": no ZeroDivisionError checks, which would block
#: vectorisation.
JIT_FAST: dict[str, Any] = dict(cache=True, nogil=True, fastmath=True, error_model="numpy", **PIN_RUNTIME, **NO_CFUNC)
#: Random streams, environments, bookkeeping: no fastmath, so results match numpy bit for bit.
JIT_EXACT: dict[str, Any] = dict(cache=True, nogil=True, error_model="numpy", **PIN_RUNTIME, **NO_CFUNC)
#: The same for helpers only jitted code calls (element bodies, physics, GEMM pieces): no CPython
#: wrapper, whose IR (every argument unboxed), optimisation and machine code are about a third of
#: a 14-argument body's compile. Calling one from Python raises a TypeError.
JIT_FAST_INNER: dict[str, Any] = dict(JIT_FAST, no_cpython_wrapper=True)
JIT_EXACT_INNER: dict[str, Any] = dict(JIT_EXACT, no_cpython_wrapper=True)
#: Helpers inlined into their callers at Numba IR level, where a call costs more than the work:
#: element bodies that take records (tuples of arrays: a transition, a rollout step), whose
#: unpacking, called, increfs and decrefs every array through the runtime (TD3's batch gather,
#: 100 rows, 12 arrays: 13.9 µs a call against 0.68 inlined); per-element math LLVM leaves as
#: calls (the multirotor's derivative returns a 17-tuple through memory; the normal quantile runs
#: 18 times a step): the multirotor's stepping 1.45 → 2.0 M steps/s. Each call site is typed and
#: lowered again, so a helper is inlined at one site where it can be (a loop over RK4's stages).
JIT_EXACT_INLINED: dict[str, Any] = dict(JIT_EXACT_INNER, inline="always")
#: The threaded twins of per-index loops (:func:`per_index`'s ``threaded``): the same bodies,
#: the indices split over Numba's threads (:func:`batch_kernel`).
JIT_EXACT_THREADED: dict[str, Any] = dict(JIT_EXACT, parallel=True)
#: extents from which a per-index kernel with a threaded twin runs it, where DISPATCHRL_ENV_THREADS
#: asks for threads (see :func:`batch_kernel`): 1024 Pendulums are ~0.1 ms of work a step
THREADED_FROM = 1024


#: Float arguments of staged kernels (learning rates, γ, noise scales...) are run-time values of
#: the fused step, so a new value reuses the compiled program; False bakes them into its source
#: as before (each value then compiles its own step, with the constants folded).
RUNTIME_SCALARS = True


def configure_numba_cache() -> None:
    """Put Numba's disk cache in a folder named by the hash of dispatchrl's sources.

    Numba checks only the timestamp of a kernel's own file, so a kernel calling a helper from
    another module (or a fused step embedding both) could load stale machine code after the
    helper changed. A per-source-hash folder makes any edit start a fresh cache.
    NUMBA_CACHE_DIR, if set, is the parent of that folder.
    """
    config: Any = numba.config  # its attributes are made at import, unseen by type checkers
    base = config.CACHE_DIR or str(cache_dir() / "numba")
    config.CACHE_DIR = os.path.join(base, f"dispatchrl-{package_fingerprint()[:16]}")


configure_numba_cache()  # before any kernel module is decorated: Numba reads it at decoration


#: LLVM's optimisation level for the code dispatchrl compiles into fused steps (Numba's NUMBA_OPT,
#: whose default is 3): measured bit-identical to 3 in every fingerprint at the same training
#: speed, a fused step's compile about a quarter shorter (NOTES "fused steps at O1"). NUMBA_OPT,
#: if set, wins.
STEP_OPT_LEVEL = None if "NUMBA_OPT" in os.environ else 1


@contextlib.contextmanager
def step_opt_level() -> Iterator[None]:
    """Numba's optimisation level set to :data:`STEP_OPT_LEVEL` while a fused step (and the
    kernels it compiles) compiles, and back after: other Numba code of the process keeps its own."""
    config: Any = numba.config
    saved = config.OPT
    if STEP_OPT_LEVEL is not None:
        config.OPT = type(saved)(STEP_OPT_LEVEL)
    try:
        yield
    finally:
        config.OPT = saved


def guard_numba_cache() -> None:
    """Make Numba's disk cache (under its cache folder) an optimisation that never fails a run.

    Numba raises from its cache on a damaged entry (a truncated ``.nbi``/``.nbc``: an unpickling
    error) and on a failed save (a full disk: ``OSError``), both in the middle of compiling. Here a
    damaged entry is discarded (its index removed, so the next save starts it afresh) and the
    function recompiled; a failed save leaves the compiled code to this process. Each warns once."""
    caching: Any = numba.core.caching
    cache_class = caching.Cache
    if getattr(cache_class.load_overload, "dispatchrl_guarded", False):
        return
    load, save = cache_class.load_overload, cache_class.save_overload

    def ours(cache: Any) -> bool:
        root = numba.config.CACHE_DIR  # type: ignore[attr-defined]  # made at import, unseen by mypy
        return bool(root) and os.path.abspath(str(cache._cache_path)).startswith(os.path.abspath(root))

    def load_overload(self: Any, sig: Any, target_context: Any) -> Any:
        try:
            return load(self, sig, target_context)
        except StaleKernel:
            return None  # a miss: the fused step compiles again, and its save replaces this entry
        except Exception as error:
            if not ours(self):
                raise
            index = self._cache_file._index_path
            try:
                os.unlink(index)
            except OSError:
                pass
            warn_once(
                "numba-damaged",
                f"dispatchrl: a compiled-kernel cache entry ({index}) is damaged ({type(error).__name__}: "
                f"{error}); discarded, recompiling",
            )
            return None

    def save_overload(self: Any, sig: Any, data: Any) -> None:
        try:
            save(self, sig, data)
        except Exception as error:
            if not ours(self):
                raise
            reason = getattr(error, "strerror", None) or f"{type(error).__name__}: {error}"
            warn_once(
                "numba-save",
                f"dispatchrl: could not save compiled kernels into the cache {numba.config.CACHE_DIR} "  # type: ignore[attr-defined]
                f"({reason}); they are kept for this process only",
            )

    load_overload.dispatchrl_guarded = True  # type: ignore[attr-defined]
    cache_class.load_overload, cache_class.save_overload = load_overload, save_overload


guard_numba_cache()


class StaleKernel(Exception):
    """A cached fused step calls a kernel whose cached code is no longer the one it was compiled
    against (recompiled since, e.g. by another process: Numba names compiled code with a
    per-process counter). Its entry is then a cache miss: the step compiles again."""


def load_called_kernel(module: str | None, name: str, signature: tuple, symbol: str) -> None:
    """Run before a cached fused step's code is loaded: compile or load the kernel it calls by
    ``symbol`` (see :func:`call_kernels_unlinked`), or refuse when that kernel's code is another."""
    import importlib

    if module is None:  # only a step with importable kernels is cached
        raise StaleKernel(f"{name}{signature}: not importable")
    kernel = getattr(importlib.import_module(module), name)
    kernel.compile(signature)
    if kernel.overloads[signature].fndesc.mangled_name != symbol:
        raise StaleKernel(f"{module}.{name}{signature}: the cached step calls {symbol}")


#: the kernels of the fused step compiling now, called without linking their code in
_UNLINKED: contextvars.ContextVar[tuple | None] = contextvars.ContextVar("dispatchrl_unlinked", default=None)
#: (kernel, signature) → compiled code, of the kernels fused steps call unlinked since the last
#: :func:`keep_called_kernels`
_CALLED: dict[tuple, Any] = {}


def call_kernels_unlinked() -> None:
    """Let a fused step call its kernels' compiled code instead of linking a copy of their LLVM IR
    into its module, which Numba then optimises and compiles to machine code again (TD3: 35
    kernels, 1.3 s of a cold step's serial compile). Numba links callees so that LLVM may inline
    them; a fused step's kernels are loops its inliner left alone. The step's library holds on to
    the kernels' libraries (their code), and its disk-cache entry loads them first
    (:func:`load_called_kernel`, through Numba's ``reload_init``)."""
    library_class: Any = numba.core.codegen.CPUCodeLibrary
    link = library_class.add_linking_library
    if getattr(link, "dispatchrl_unlinked", False):
        return

    def add_linking_library(self: Any, library: Any) -> None:
        kernels = _UNLINKED.get()
        if kernels is None or self.name != "fused_step":
            return link(self, library)
        for kernel in kernels:
            for signature, compiled in kernel.overloads.items():
                if compiled.library is library:
                    called = self.__dict__.setdefault("dispatchrl_called", [])  # their code lives on
                    if library not in called:  # once per kernel, however many calls
                        library._ensure_finalized()
                        called.append(library)
                        symbol = compiled.fndesc.mangled_name
                        loader = (_import_name(kernel), kernel.py_func.__name__, signature, symbol)
                        self._reload_init.add(functools.partial(load_called_kernel, *loader))
                        _CALLED[(kernel, signature)] = compiled
                    return None
        return link(self, library)

    add_linking_library.dispatchrl_unlinked = True  # type: ignore[attr-defined]
    library_class.add_linking_library = add_linking_library


call_kernels_unlinked()


def keep_called_kernels(helper: Any) -> None:
    """Once the fused steps compiled: if a spawned precompile helper ran, save again the kernels
    they call that this process compiled (rather than loaded), so the disk cache holds the code
    the cached steps were compiled against: that helper may have compiled the same kernel at the
    same time and saved its own after ours. (A forked helper claims its jobs: no kernel twice.)"""
    if helper is not None and not isinstance(helper, ForkedHelper):
        for (kernel, signature), compiled in _CALLED.items():
            if any(tuple(sigutils.normalize_signature(s)[0]) == signature for s in kernel._cache_misses):
                kernel._cache.save_overload(signature, compiled)
    _CALLED.clear()


def limit_blas_threads() -> None:
    """Run BLAS on DISPATCHRL_BLAS_THREADS threads (default 1; 0 leaves it alone).

    The matrices of RL networks are small: BLAS threads only add synchronisation, and on a busy
    machine a thread waiting for a taken core turns a 30 µs product into milliseconds. This
    applies to every BLAS in the process (numpy's too), from when dispatchrl is imported."""
    setting = os.environ.get("DISPATCHRL_BLAS_THREADS", "1")
    if not setting.isdigit():
        raise ConfigError(f"DISPATCHRL_BLAS_THREADS must be a non-negative int, got {setting!r}")
    threads = int(setting)
    if threads > 0:
        import scipy.linalg.cython_blas  # noqa: F401  (loads the BLAS Numba's np.dot calls)
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=threads, user_api="blas")


limit_blas_threads()


def trim_heap() -> None:
    """Hand the C heap's free pages back to the OS (glibc's ``malloc_trim``; elsewhere nothing).

    Arrays under glibc's mmap threshold (which rises up to 32 MiB once a larger block is freed)
    live on the heap, and freeing them returns nothing to the OS. A resumed run frees a whole
    state's worth at once (the old state and its snapshot copy), and the next one allocates
    larger arrays (the replay buffer grows with the budget) that do not fit those holes: without
    a trim, every ``learn`` call left its freed state behind in the resident memory."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        malloc_trim = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return
    malloc_trim.argtypes, malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
    malloc_trim(0)


@functools.cache
def blas_core_types() -> frozenset[str]:
    """The core types (OpenBLAS's kernel sets, e.g. "Haswell", "SkylakeX") of the BLAS libraries
    loaded in this process, Numba's (SciPy's) included; empty when none reports one."""
    try:
        import scipy.linalg.cython_blas  # noqa: F401  (the BLAS Numba's np.dot calls)
        from threadpoolctl import threadpool_info
    except ImportError:
        return frozenset()
    return frozenset(
        str(pool["architecture"])
        for pool in threadpool_info()
        if pool.get("user_api") == "blas" and pool.get("architecture")
    )


@functools.cache
def vector_fma_widths() -> frozenset[int]:
    """The float32 vector widths (8, 16) whose fused multiply-add Numba's code generator emits as
    one instruction on one register: AVX2 + FMA gives 8, AVX-512 16. Probed from the assembly of
    the target Numba compiles for, so NUMBA_CPU_NAME / NUMBA_CPU_FEATURES count (empty features:
    the named CPU's own), and so does LLVM's tuning, which may split 512-bit vectors."""
    from llvmlite import binding as llvm
    from numba.core.registry import cpu_target

    codegen = cpu_target.target_context.codegen()
    widths = set()
    try:
        machine = llvm.Target.from_default_triple().create_target_machine(
            cpu=codegen._get_host_cpu_name(), features=codegen._get_host_cpu_features(), opt=2
        )
        for width, register in ((8, "ymm"), (16, "zmm")):  # x86 names; other ISAs find none
            vec = f"<{width} x float>"
            module = llvm.parse_assembly(
                f"declare {vec} @llvm.fma.v{width}f32({vec}, {vec}, {vec})\n"
                f"define {vec} @probe({vec} %a, {vec} %b, {vec} %c) {{\n"
                f"  %r = call {vec} @llvm.fma.v{width}f32({vec} %a, {vec} %b, {vec} %c)\n  ret {vec} %r\n}}\n"
            )
            lines = [line for line in machine.emit_assembly(module).splitlines() if "fmadd" in line]
            if len(lines) == 1 and register in lines[0]:
                widths.add(width)
    except RuntimeError:  # LLVM refused the target: no tiles (they are an optimisation only)
        return frozenset()
    return frozenset(widths)


# Denormal floats (Adam's first moment decays into them for dead ReLU units) cost ~100× on x86.
# RLtools, built with -ffast-math, runs with flush-to-zero and denormals-are-zero set process-wide;
# fused CPU steps set the same MXCSR bits around their loop only and restore them afterwards.
_FTZ_DAZ = 0x8040
FLUSH_DENORMALS = platform.machine().lower() in ("x86_64", "amd64")


@intrinsic
def _mxcsr_read(typingctx):
    def codegen(context, builder, signature, args):
        slot = cgutils.alloca_once(builder, ir.IntType(32))
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer()]), "llvm.x86.sse.stmxcsr"
        )
        builder.call(fn, [builder.bitcast(slot, ir.IntType(8).as_pointer())])
        return builder.load(slot)

    return types.uint32(), codegen


@intrinsic
def _mxcsr_write(typingctx, value):
    def codegen(context, builder, signature, args):
        slot = cgutils.alloca_once_value(builder, args[0])
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer()]), "llvm.x86.sse.ldmxcsr"
        )
        builder.call(fn, [builder.bitcast(slot, ir.IntType(8).as_pointer())])
        return context.get_dummy_value()

    return types.void(types.uint32), codegen


@njit(**JIT_EXACT)
def flush_denormals_enter():
    """Set flush-to-zero and denormals-are-zero; returns the previous MXCSR for the exit."""
    previous = _mxcsr_read()
    _mxcsr_write(previous | np.uint32(_FTZ_DAZ))
    return previous


@njit(**JIT_EXACT)
def flush_denormals_exit(previous):
    _mxcsr_write(previous)


def is_numba(kernel: object) -> bool:
    """Whether ``kernel`` is an ``@njit`` function (a fused step can call it)."""
    return isinstance(kernel, Dispatcher)


def _compiles(node: object) -> bool:
    return all(is_numba(kernel) for kernel, _ in kernel_calls([node]))


@compile_step.dispatch
def compile_step(device: CPU, calls: list) -> Program:
    # Runs of Numba kernels (branches included) fuse into njit programs; anything else (a Generic
    # fallback method, a user's Python kernel) runs from Python between them.
    return segmented_program(calls, _compiles, njit_program, python_program)


def _literal(value: object) -> str:
    """A staged kernel's number argument as Python source."""
    if isinstance(value, (bool, np.bool_)):
        return repr(bool(value))
    if isinstance(value, (int, np.integer)):
        # A bare int literal types as Literal[int](value), and Numba compiles a kernel once per
        # literal value it is called with (15 nonfinite_flag and 3 of each dense kernel in TD3);
        # int64(...) makes one specialization per signature.
        value = int(value)
        return f"int64({value})" if -(2**63) <= value < 2**63 else repr(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return repr(value) if np.isfinite(value) else f"float({str(value)!r})"
    if value is None:
        return "None"
    raise ConfigError(f"cannot stage a kernel argument of type {type(value).__name__}: pass Arrays or plain numbers")


def _import_name(kernel: Dispatcher) -> str | None:
    """The module a generated step imports ``kernel`` from, or None where it cannot (a kernel not
    found by its name, or a session's with no file). A script's kernels live in ``__main__``,
    which no other module can import by that name: an alias named by the script's path stands for
    it, so the same script run again loads its fused step from the cache."""
    module = sys.modules.get(kernel.py_func.__module__)
    if module is None or getattr(module, kernel.py_func.__name__, None) is not kernel:
        return None
    if module.__name__ != "__main__":
        return module.__name__
    path = getattr(module, "__file__", None)
    if path is None:
        return None
    alias = f"dispatchrl_main_{hashlib.sha256(os.path.abspath(path).encode()).hexdigest()[:16]}"
    sys.modules.setdefault(alias, module)
    return alias if sys.modules[alias] is module else None


_BEFORE_FIRST_RUN: dict[str, Callable[[], None]] = {}


def before_first_run(prepare: Callable[[], None]) -> None:
    """Run ``prepare`` (a module-level function, idempotent) once the fused step being staged is
    compiled, before its first run: work its compile does not need, such as compiling the tiled
    GEMM drivers its kernels call through a pointer. A cold step's precompile helper runs it first,
    on the second core, into the disk cache, so this process only loads what it made."""
    _BEFORE_FIRST_RUN[f"{prepare.__module__}.{prepare.__qualname__}"] = prepare


class _ForkRegion:
    """A fork's two sides (recorded nodes), found between its marker kernels."""

    def __init__(self, first: list, second: list) -> None:
        self.first, self.second = first, second


def _fork_marker(node: object) -> str | None:
    """ "begin", "next" or "end" for a fork's marker kernel call (kernels.core.cpu_fork), else None."""
    if isinstance(node, Branch):
        return None
    return getattr(getattr(node[0], "py_func", None), "fork_marker", None)  # type: ignore[index]


def _fork_regions(nodes: list, nested: bool = False) -> list:
    """``nodes`` with each fork's markers and sides as a :class:`_ForkRegion` (inside a side, or
    unbalanced, the markers are dropped: the sides run in sequence)."""
    out: list = []
    i = 0
    while i < len(nodes):
        node, marker = nodes[i], _fork_marker(nodes[i])
        if isinstance(node, Branch):
            branch = Branch(node.condition)
            branch.then = _fork_regions(node.then, nested)
            branch.otherwise = _fork_regions(node.otherwise, nested)
            out.append(branch)
        elif marker == "begin" and not nested:
            kinds = [_fork_marker(n) for n in nodes[i + 1 :]]
            try:
                j = i + 1 + kinds.index("next")
                k = j + 1 + kinds[j - i :].index("end")
            except ValueError:
                k = -1
            if k < 0 or "begin" in kinds[: k - i - 1]:
                i += 1  # unbalanced or nested: in sequence
                continue
            out.append(_ForkRegion(_fork_regions(nodes[i + 1 : j], True), _fork_regions(nodes[j + 1 : k], True)))
            i = k
        elif marker is None:
            out.append(node)
        i += 1
    return out


def njit_program(calls: list) -> Program:
    """One generated ``@njit`` function running ``calls`` (Numba kernels and branches over them)
    ``n`` times; cached on disk when every kernel is importable by name."""
    kernels: dict[Any, str] = {}
    arrays: dict[int, tuple[str, Any]] = {}
    hyperparameters: list[float] = []

    def array_name(a):
        return arrays.setdefault(id(a.data), (f"a{len(arrays)}", a.data))[0]

    def argument(a):
        if isinstance(a, Array):
            return array_name(a)
        if RUNTIME_SCALARS and is_runtime_scalar(a):
            hyperparameters.append(float(a))
            return f"h{len(hyperparameters) - 1}"
        return _literal(a)

    # a fork's second side is offered to the worker, which runs it from fused_worker; the caller
    # runs it itself where the worker has not claimed it by the end of the first side
    seconds: list[list[str]] = []

    def call(node, indent):
        if isinstance(node, _ForkRegion):
            r = len(seconds)
            seconds.append(python_source(node.second, "            ", call, test) or ["            pass"])
            return [
                f"{indent}job = fork_publish(sync, {r})",
                *python_source(node.first, indent, call, test),
                f"{indent}if fork_claim(sync, job):",
                *(python_source(node.second, indent + "    ", call, test) or [f"{indent}    pass"]),
                f"{indent}fork_join(sync, job)",
            ]
        kernel, args = node
        name = kernels.setdefault(kernel, f"k{len(kernels)}")
        rendered = [argument(a) for a in args]
        return [f"{indent}{name}({', '.join(rendered)})"]

    def test(branch, indent):
        return [], branch.condition.expression(array_name(branch.condition.counter))

    # the module of the fork markers, if any (kernels.core.cpu_fork, a later layer than this one)
    markers = [kernel for kernel, _ in kernel_calls(calls) if _fork_marker((kernel, ())) is not None]
    fork_module: Any = sys.modules[markers[0].py_func.__module__] if markers else None
    body = python_source(_fork_regions(calls), "        ", call, test)
    # Float arguments (learning rates, γ, noise scales, bounds...) enter at run time, read once
    # before the loop: a new value reuses the compiled step. Ints and bools (sizes, counts,
    # switches) stay literals, as they may shape loops.
    raw = [data for _, data in arrays.values()]
    names = [name for name, _ in arrays.values()]
    if hyperparameters:
        names.append("hyperparameters")
        raw.append(np.array(hyperparameters, np.float64))
    params = ", ".join(names)
    unpack = [f"    h{i} = hyperparameters[{i}]" for i in range(len(hyperparameters))]
    modules = {k: _import_name(k) for k in kernels}
    cacheable = all(modules.values())
    imports = (
        [f"from {modules[k]} import {k.py_func.__name__} as {name}" for k, name in kernels.items()] if cacheable else []
    )
    # The loop allocates nothing; without Numba's runtime each kernel call skips an incref/decref
    # call pair per array argument (100 calls: 6.3 -> 2.9 µs). Callees that do not set ``_nrt``
    # inherit the caller's, so only kernels that pin it on (PIN_RUNTIME: dispatchrl's) allow it.
    pinned = all(k.targetoptions.get("_nrt") for k in (*kernels, flush_denormals_enter))
    runtime = not (PIN_RUNTIME and pinned)
    # The loop runs with denormals flushed, as code built with -ffast-math does.
    flush = FLUSH_DENORMALS
    if flush and cacheable:
        imports.append(f"from {__name__} import flush_denormals_enter, flush_denormals_exit")
    fork_names = ("fork_claim", "fork_join", "fork_publish", "fork_wait", "fork_worker_done")
    if seconds and cacheable:
        imports.append(f"from {fork_module.__name__} import {', '.join(fork_names)}")
    decorator = (
        f"@njit(cache={cacheable}, nogil=True{'' if runtime else ', _nrt=False'}"
        f"{', no_cfunc_wrapper=True' if NO_CFUNC else ''})"
    )
    sync = "sync, " if seconds else ""
    worker = [
        "",
        "",
        decorator,
        f"def fused_worker(sync, {params}):",
        *unpack,
        *(["    fp_mode = flush_denormals_enter()"] if flush else []),
        "    while True:",
        "        region = fork_wait(sync)",
        "        if region < 0:",
        "            break",
        *[
            line
            for r, side in enumerate(seconds)
            for line in (f"        {'if' if r == 0 else 'elif'} region == {r}:", *side)
        ],
        "        fork_worker_done(sync)",
        *(["    flush_denormals_exit(fp_mode)"] if flush else []),
    ]
    source = "\n".join(
        [
            "# generated by dispatchrl.backends.cpu: one fused step, do not edit",
            "from numba import njit",
            "from numpy import int64",
            *imports,
            "",
            "",
            decorator,
            f"def fused_step(n{', ' if params or seconds else ''}{sync}{params}):",
            *unpack,
            *(["    fp_mode = flush_denormals_enter()"] if flush else []),
            "    for _ in range(n):",
            *(body or ["        pass"]),
            *(["    flush_denormals_exit(fp_mode)"] if flush else []),
            *(worker if seconds else []),
            "",
        ]
    )
    fused_worker: Any
    if cacheable:
        module = _load_cached(source, set(modules.values()))
        fused, fused_worker = module.fused_step, getattr(module, "fused_worker", None)
    else:
        namespace = {name: k for k, name in kernels.items()}
        namespace.update(flush_denormals_enter=flush_denormals_enter, flush_denormals_exit=flush_denormals_exit)
        if seconds:
            namespace.update({name: getattr(fork_module, name) for name in fork_names})
        exec(compile(source, "<dispatchrl fused step>", "exec"), namespace)
        fused, fused_worker = namespace["fused_step"], namespace.get("fused_worker")
    if seconds:
        raw.insert(0, fork_module.new_sync())  # before its worker starts: the caller claims
    prepares = list(_BEFORE_FIRST_RUN.values())
    _BEFORE_FIRST_RUN.clear()
    # progress displays say which kernel of how many is compiling (a cold step takes minutes);
    # counted before the helper starts filling the disk cache
    progress = kernel_progress(cold_kernels(calls))
    # cold kernels: a second core helps (unless one helper serves all the steps compiled together)
    shared = _STEPS_HELPER.get()
    helper = start_precompile(calls, prepares, step_opt_level) if cacheable and shared is None else None
    token = _UNLINKED.set(tuple(kernels))
    try:
        with compile_activity.kernels(progress), step_opt_level():
            compile_share(helper or shared)  # this process's part of the helper's kernels
            fused(0, *raw)  # compile (or load from the disk cache) now, not on the first real call
    finally:
        _UNLINKED.reset(token)
        stop_precompile(helper)
        if shared is None:
            keep_called_kernels(helper)
    for prepare in prepares:
        prepare()
    if seconds:
        fused_worker(fork_module.new_sync(stopped=True), *raw[1:])  # compiled (or loaded) now
        return fork_module.forked_program(fused, fused_worker, raw, raw[-1] if hyperparameters else None)

    def run(n):
        fused(n, *raw)

    run.program = fused  # type: ignore[attr-defined]  # the compiled function: shared by steps of one structure
    run.hyperparameters = raw[-1] if hyperparameters else None  # type: ignore[attr-defined]
    return run


#: the helper started by ``compiling_steps`` that serves the steps compiled now (None: none does)
_STEPS_HELPER: contextvars.ContextVar[Any] = contextvars.ContextVar("dispatchrl_steps_helper", default=None)


@compiling_steps.dispatch
def compiling_steps(device: CPU, steps: list) -> contextlib.AbstractContextManager:
    """Steps compiled together (an env step and an update): one precompile helper for all their
    cold kernels, which starts on the last step's while this process compiles the first (PPO
    after TD3 and SAC: 5.7 -> 4.0 s of compilation, as the first step alone has too few kernels to
    start one)."""
    return _one_helper([call for calls in steps for call in calls])


@contextlib.contextmanager
def _one_helper(calls: list) -> Iterator[None]:
    helper = start_precompile(calls, list(_BEFORE_FIRST_RUN.values()), step_opt_level)
    token = _STEPS_HELPER.set(helper)
    try:
        yield
    finally:
        _STEPS_HELPER.reset(token)
        stop_precompile(helper)
        keep_called_kernels(helper)


def is_runtime_scalar(value: object) -> bool:
    """Whether a staged kernel's argument is a runtime value of the fused CPU step rather than a
    literal of its source: floats (not bools or ints, which may size loops)."""
    return isinstance(value, (float, np.floating))


def _load_cached(source: str, kernel_modules: set) -> Any:
    digest = hashlib.sha256(source.encode())
    digest.update(package_fingerprint().encode())
    for module_name in sorted(kernel_modules):
        digest.update(module_fingerprint(module_name).encode())
    name = f"fused_{digest.hexdigest()[:24]}"
    return import_generated(source, name, "fused", "dispatchrl_fused")


def per_index(
    body,
    extent: str,
    name: str,
    params=None,
    more=(),
    before=(),
    after=(),
    uses=(),
    options: str = "JIT_EXACT",
    fields: dict | None = None,
    threaded: bool = False,
) -> Dispatcher:
    """The CPU loop kernel ``name``, generated from the element body ``body(i, *args)`` as CUDA's
    :func:`dispatchrl.backends.cuda.per_index` generates its forms: ``for i in range(extent):
    body(i, *args)``, ``args`` the body's parameters after ``i`` (those named in ``fields`` a
    record's arrays, see :func:`dispatchrl.staging.grouped_arguments`). The kernel's parameters
    are ``params`` (default ``args``, records' arrays one by one) then ``more``; ``before`` and
    ``after`` are statements around the loop (e.g. reading and advancing a counter stream),
    which may call the jitted functions ``uses``; ``options`` names the jit options in this
    module. See :func:`_generated_kernel`. ``threaded``: the body writes only index i's elements,
    so the kernel gets a twin whose loop is Numba's ``prange``, generated when :func:`batch_kernel`
    first picks it (the same bits: each index runs the same body)."""
    py = getattr(body, "py_func", body)
    flat, args = grouped_arguments(py.__code__.co_varnames[1 : py.__code__.co_argcount], fields or {})
    params = (*(flat if params is None else params), *more)

    def kernel(loop: str, kernel_name: str, kernel_options: str) -> Dispatcher:
        lines = [*before, f"for i in {loop}({extent}):", f"    _body(i, {args})", *after]
        return _generated_kernel(py, kernel_name, params, lines, uses, kernel_options)

    serial = kernel("range", name, options)
    if threaded:
        _THREADED[serial] = functools.partial(kernel, "prange", f"{name}_threaded", f"{options}_THREADED")
    return serial


#: per-index kernels with a threaded twin: the twin's maker, then the twin once made
_THREADED: dict[Dispatcher, Any] = {}


def env_threads() -> int:
    """DISPATCHRL_ENV_THREADS (default 1), capped at Numba's threads (NUMBA_NUM_THREADS)."""
    setting = os.environ.get("DISPATCHRL_ENV_THREADS", "1")
    if not setting.isdigit() or int(setting) < 1:
        raise ConfigError(f"DISPATCHRL_ENV_THREADS must be an int >= 1, got {setting!r}")
    return min(int(setting), numba.config.NUMBA_NUM_THREADS)  # type: ignore[attr-defined]


def batch_kernel(kernel: Any, extent: int) -> Any:
    """``kernel``, or its threaded twin (:func:`per_index`) where it has one, ``extent`` is at
    least :data:`THREADED_FROM` and DISPATCHRL_ENV_THREADS asks for more than one thread.

    Opt-in: the indices are split statically, so a thread whose core another process holds
    stalls the step; beside one busy process 2 threads stepped 4096 multirotors at 0.7M steps/s
    against one thread's 1.2M (quiet: 2.0M against 1.1M; NOTES.md)."""
    twin = _THREADED.get(kernel)
    if twin is None or extent < THREADED_FROM:  # small batches (an eager step's call) read no setting
        return kernel
    threads = env_threads()
    if threads < 2:
        return kernel
    numba.set_num_threads(threads)
    if not isinstance(twin, Dispatcher):
        twin = _THREADED[kernel] = twin()
    return twin


def one_lane(body, name: str, scratch: str, options: str = "JIT_FAST") -> Dispatcher:
    """The CPU kernel ``name`` of ``body(lane, lanes, partial, *args)``, a reduction written once
    for any number of cooperating lanes (CUDA's :func:`dispatchrl.backends.cuda.lanes_block` runs
    it on a block's threads): one lane, whose partial sums, in a fresh float64 array of
    ``scratch`` slots (an expression over the argument names), are the totals; see
    :func:`lanes_total` and :func:`lanes_reduce`. The kernel's parameters are ``args``; ``options``
    names its jit options."""
    py = getattr(body, "py_func", body)
    params = py.__code__.co_varnames[3 : py.__code__.co_argcount]
    return _generated_kernel(py, name, params, [f"_body(0, 1, np.empty({scratch}), {', '.join(params)})"], (), options)


@njit(**JIT_FAST_INNER)
def lanes_total(partial, value, lane, lanes):
    """``value`` summed over the lanes of a reduction (see :func:`one_lane`): one lane's own."""
    return value


@njit(**JIT_FAST_INNER)
def lanes_reduce(partial, columns, lane, lanes) -> None:
    """Sum each of ``columns`` groups of ``lanes`` partial sums, ``partial[c * lanes + lane]``, into
    its first slot (see :func:`one_lane`): with one lane, each already is its total."""


def _generated_kernel(py, name: str, params, lines, uses, options: str) -> Dispatcher:
    """The kernel ``name(params)`` whose statements ``lines`` call ``py`` as ``_body`` (and the
    jitted functions ``uses``), compiled with the jit options named ``options``. The source is
    written to the cache folder and imported, so Numba caches it as a hand-written kernel (the
    folder's name changes with dispatchrl's sources) and fused steps import it by name."""
    source = "\n".join(
        [
            "# generated by dispatchrl.backends.cpu: a kernel of a body written once, do not edit",
            "import numpy as np",
            "from numba import njit, prange",
            f"from {__name__} import {options}",
            f"from {py.__module__} import {py.__name__} as _body",
            *[f"from {f.py_func.__module__} import {f.py_func.__name__}" for f in uses],
            "",
            "",
            f"@njit(**{options})",
            f"def {name}({', '.join(params)}):",
            *[f"    {line}" for line in lines],
            "",
        ]
    )
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    return getattr(import_generated(source, f"{name}_{digest}", "loops", "dispatchrl_loops"), name)
