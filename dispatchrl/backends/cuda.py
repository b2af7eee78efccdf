"""The CUDA runtime: launch configurations, device twins of CPU helpers, block-level forms of
kernels, and ``compile_step(CUDA)``: one generated single-block kernel per fused step.

Imported only when a CUDA device is first made (``CUDA.method_modules``): importing numba.cuda is
slow and CPU-only users should not pay for it. This lazy, string-named import is the one
exception to plain imports in dispatchrl. Kernels stay within the subset real numba.cuda compiles
(the simulator would accept more)."""

import contextlib
import re
import types
from collections.abc import Callable
from typing import Any

import numba
import numpy as np
from numba import cuda
from numba.core.extending import _Intrinsic
from numba.core.registry import CPUDispatcher

from ..arrays import Array
from ..devices import CUDA
from ..errors import ConfigError, DeviceError
from ..staging import Program, compile_step, grouped_arguments, kernel_calls, launch, python_program, python_source, raw

__all__ = [
    "BLOCK_1D",
    "BLOCK_2D",
    "BLOCK_FORMS",
    "BLOCK_WORK",
    "DYNAMIC_SHARED",
    "FUSED_BLOCK",
    "HARDWARE_FUSED_BLOCK",
    "MAX_DYNAMIC_SHARED",
    "MAX_FUSED_BLOCK",
    "MAX_PARAMETER_BYTES",
    "REDUCE_THREADS",
    "SINGLE_BLOCK_MAX_WORK",
    "Launch",
    "block_form",
    "block_program",
    "block_work",
    "check_launch_arguments",
    "device_twin",
    "flat",
    "generated",
    "grid_1d",
    "grid_2d",
    "lanes_block",
    "lanes_reduce",
    "lanes_total",
    "launch_1d",
    "launch_2d",
    "launch_once",
    "once",
    "per_index",
    "refused_argument",
    "register_cap",
    "thread_index",
    "unfused_kernels",
    "whole_block",
]

BLOCK_1D = 128
BLOCK_2D = (16, 8)
REDUCE_THREADS = 128  # one block reduces a whole array (shared memory tree)
_SIMULATOR = bool(getattr(numba.config, "ENABLE_CUDASIM", 0))
#: threads of the one block a fused step runs in (a power of two in [MIN_FUSED_BLOCK, MAX_FUSED_BLOCK]).
#: 512, the largest at which the default TD3, SAC and demo steps fit the cap of 128 registers without
#: spilling (sm_90, ``benchmarks/cuda_static.py``; with :data:`thread_index`): twice the warps of 256
#: to hide the products' latency. At 1024 (cap 64) TD3's step spills 1.4 KB. The simulator runs each
#: thread as a Python thread: 64 there.
HARDWARE_FUSED_BLOCK = 512
FUSED_BLOCK = 64 if _SIMULATOR else HARDWARE_FUSED_BLOCK
#: the smallest fused block: the products lay 16 threads across their 64 output columns
MIN_FUSED_BLOCK = 16
#: registers of one streaming multiprocessor (sm_70 to sm_90): a block of N threads launches only
#: if the kernel uses at most REGISTER_FILE // N registers per thread
REGISTER_FILE = 65536
#: the largest block a block-level form supports (sizes its shared reduction scratch)
MAX_FUSED_BLOCK = 1024
#: a step fuses into one block only while its largest call does at most this much work (the product
#: of the call's literal sizes: multiply-adds for dense layers, elements otherwise); larger steps
#: keep the launch loop, whose grids use the whole GPU. A placeholder, not yet measured: the demo's
#: largest call (100 x 64 x 64) is 0.4M, dense 1024 x 4096 is 4G. See docs/DESIGN.md.
SINGLE_BLOCK_MAX_WORK = 1 << 20
#: set True before a step is compiled to time its calls on the device (benchmarks/cuda_profile.py):
#: after each call's barrier, thread 0 adds the SM clock cycles since the previous barrier to
#: ``run.profile_cycles[k]`` and counts the call in ``run.profile_counts[k]`` (host arrays, read by
#: ``run.read_profile()``); ``run.profile_labels[k]`` names call k. Every such program is appended
#: to PROFILED. Under the simulator the clock is the host's nanoseconds.
PROFILE = False
PROFILED: list = []
#: dynamic shared memory a launch may ask for without opting in (cudaFuncAttributeMaxDynamicSharedMemorySize,
#: which numba-cuda does not set): larger launches fail with CUDA_ERROR_INVALID_VALUE
MAX_DYNAMIC_SHARED = 48 * 1024
#: kernel parameter space from CUDA 12.1 on sm_70+ (4096 bytes before); numba passes an array as
#: 5 + 2 * ndim 8-byte fields. A TD3 step takes ~11 KiB: it needs CUDA >= 12.1 (unchecked on hardware)
MAX_PARAMETER_BYTES = 32764


def register_cap(block: int) -> int:
    """Registers per thread a fused kernel of ``block`` threads is compiled with: the most at which
    the block still launches (ptxas spills past it rather than refusing the launch)."""
    return min(255, REGISTER_FILE // block)


def device_twin(cpu_function, **callees):
    """The CPU ``@njit`` helper ``cpu_function`` (or a plain Python function in the Numba subset)
    compiled as a CUDA device function from the same Python source, so the backends evaluate
    identical expressions and cannot drift. ``callees`` rebinds the jitted helpers it calls to
    their device twins; a CPU-jitted callee or a Numba intrinsic left unbound is refused here,
    because real CUDA cannot call it and the simulator would not notice."""
    py = getattr(cpu_function, "py_func", cpu_function)
    scope = {**py.__globals__, **callees}
    stray = sorted(name for name in py.__code__.co_names if isinstance(scope.get(name), (CPUDispatcher, _Intrinsic)))
    if stray:
        raise TypeError(
            f"device_twin({py.__name__}): it calls CPU-jitted {', '.join(stray)}; "
            "pass their device twins as keyword arguments"
        )
    return cuda.jit(device=True)(types.FunctionType(py.__code__, scope, py.__name__, py.__defaults__, py.__closure__))


def _kernel_stem(py) -> str:
    # replay_add_row -> replay_add, n_step_row -> n_step, linear_anneal_kernel -> linear_anneal
    return re.sub(r"_(at|row|body|kernel)$", "", py.__name__.lstrip("_"))


def generated(module: str, label: str, source: str, names: tuple, namespace: dict) -> tuple:
    """The Python functions ``names`` defined by ``source`` (CUDA forms written as text, e.g. a grid
    kernel and its block form from one description), with ``cuda``, ``np`` and ``namespace`` in
    scope, in ``module`` (so they are found by module and name, as hand-written ones are)."""
    scope = {"__name__": module, "cuda": cuda, "np": np, "thread_index": thread_index, **namespace}
    exec(compile(source, f"<dispatchrl CUDA forms of {label}>", "exec"), scope)
    return tuple(scope[name] for name in names)


def per_index(body, *extents: str, name: str | None = None, fields: dict | None = None, **callees) -> Any:
    """The grid kernel and its block-level form, both generated from one element body: ``body(i,
    *args)`` for one extent, ``body(i, j, *args)`` for two, written once in the Numba subset (a CPU
    ``@njit`` row body or a plain function; ``callees`` as for :func:`device_twin`; a parameter
    named in ``fields`` is a record's arrays, see :func:`dispatchrl.staging.grouped_arguments`).

    ``extents`` are expressions over the argument names (``"out.size"``, ``"x.shape[0]"``): the
    grid kernel (``<name>_kernel``, one thread per index, launched by ``launch_1d``/``launch_2d``)
    runs the body for each index below them; the block form (``<name>_block``, registered in
    :data:`BLOCK_FORMS`) takes their values as literals and strides the block over them. Returns
    the grid kernel."""
    py = getattr(body, "py_func", body)
    code = py.__code__
    params, call = grouped_arguments(code.co_varnames[len(extents) : code.co_argcount], fields or {})
    stem = name or _kernel_stem(py)
    args, bounds = ", ".join(params), [f"_n{d}" for d in range(len(extents))]
    if len(extents) == 1:
        grid = ["    _i = cuda.grid(1)", f"    if _i < {extents[0]}:", f"        _body(_i, {call})"]
        block = ["    for _i in range(thread_index(), _n0, cuda.blockDim.x):", f"        _body(_i, {call})"]
    elif len(extents) == 2:
        grid = [
            "    _i, _j = cuda.grid(2)",
            f"    if _i < {extents[0]} and _j < {extents[1]}:",
            f"        _body(_i, _j, {call})",
        ]
        block = [
            "    for _k in range(thread_index(), _n0 * _n1, cuda.blockDim.x):",
            f"        _body(_k // _n1, _k % _n1, {call})",
        ]
    else:
        raise ConfigError(f"per_index({py.__name__}): one or two extents, got {len(extents)}")
    source = "\n".join(
        [
            f"def {stem}_kernel({args}):",
            *grid,
            f"def {stem}_block({', '.join([*params, *bounds])}):",
            *block,
            f"def {stem}_sizes({args}):",
            f"    return ({', '.join(extents)},)",
        ]
    )
    grid_py, block_py, sizes = generated(
        py.__module__,
        py.__qualname__,
        source,
        (f"{stem}_kernel", f"{stem}_block", f"{stem}_sizes"),
        {"_body": device_twin(body, **callees)},
    )
    kernel = cuda.jit(grid_py)
    BLOCK_FORMS[kernel] = (cuda.jit(device=True)(block_py), sizes)
    return kernel


def once(body, name: str | None = None, **callees) -> Any:
    """The grid kernel (launched on one thread) and the block form (run by thread 0 of the block)
    of ``body(*args)``, a single-thread piece of bookkeeping such as advancing a ring's position.
    Returns the grid kernel; see :func:`per_index`."""
    py = getattr(body, "py_func", body)
    code = py.__code__
    args = ", ".join(code.co_varnames[: code.co_argcount])
    stem = name or _kernel_stem(py)
    source = "\n".join(
        [
            f"def {stem}_kernel({args}):",
            "    if cuda.grid(1) == 0:",
            f"        _body({args})",
            f"def {stem}_block({args}):",
            "    if thread_index() == 0:",
            f"        _body({args})",
        ]
    )
    grid_py, block_py = generated(
        py.__module__,
        py.__qualname__,
        source,
        (f"{stem}_kernel", f"{stem}_block"),
        {"_body": device_twin(body, **callees)},
    )
    kernel = cuda.jit(grid_py)
    BLOCK_FORMS[kernel] = (cuda.jit(device=True)(block_py), lambda *args: ())
    return kernel


def whole_block(block, name: str) -> Any:
    """The grid kernel of ``block``, a ``@cuda.jit(device=True)`` function that every thread of one
    block calls and that does a whole launch's work (a shared-memory reduction, say), launched on
    one block; ``block`` is registered as its block form. Returns the grid kernel."""
    py = getattr(block, "py_func", None) or block.fn  # (the simulator's device functions: .fn)
    code = py.__code__
    args = ", ".join(code.co_varnames[: code.co_argcount])
    source = f"def {name}_kernel({args}):\n    _block({args})"
    (grid_py,) = generated(py.__module__, py.__qualname__, source, (f"{name}_kernel",), {"_block": block})
    kernel = cuda.jit(grid_py)
    BLOCK_FORMS[kernel] = (block, lambda *args: ())
    return kernel


def lanes_block(body, name: str, threads: int, **callees) -> Any:
    """The grid kernel (launched on one block) and block form of ``body(lane, lanes, partial,
    *args)``, a reduction written once in the Numba subset for any number of cooperating lanes
    (CPU's :func:`dispatchrl.backends.cpu.one_lane` runs it as one): every thread of the block
    calls it with ``lane`` its index, ``lanes = min(blockDim, threads)`` (a power of two; threads
    past it take no rows but join the barriers) and ``partial`` the block's dynamic shared memory,
    reduced by :func:`lanes_total` and :func:`lanes_reduce` (bind them in ``callees``, as for
    :func:`device_twin`). The same sums in the same order for any block of at least ``threads``."""
    py = getattr(body, "py_func", body)
    args = ", ".join(py.__code__.co_varnames[3 : py.__code__.co_argcount])
    source = "\n".join(
        [
            f"def {name}_block({args}):",
            f"    _body(thread_index(), min(cuda.blockDim.x, {threads}), cuda.shared.array(0, dtype=float64), {args})",
        ]
    )
    namespace = {"_body": device_twin(body, **callees), "float64": numba.float64}
    (block_py,) = generated(py.__module__, py.__qualname__, source, (f"{name}_block",), namespace)
    return whole_block(cuda.jit(device=True)(block_py), name)


@cuda.jit(device=True)
def _lane_sums(partial, columns, lane, lanes) -> None:
    """Tree-reduce ``columns`` groups of ``lanes`` partial sums (slots ``c * lanes + lane``) in
    shared memory into each group's first slot; every thread of the block calls it."""
    stride = lanes // 2
    while stride > 0:
        if lane < stride:
            for c in range(columns):
                partial[c * lanes + lane] += partial[c * lanes + lane + stride]
        cuda.syncthreads()  # type: ignore[call-arg]
        stride //= 2


@cuda.jit(device=True)
def lanes_total(partial, value, lane, lanes):
    """``value`` summed over a block's ``lanes`` (in ``partial[:lanes]``), for every thread."""
    if lane < lanes:
        partial[lane] = value
    cuda.syncthreads()  # type: ignore[call-arg]
    _lane_sums(partial, 1, lane, lanes)
    total = partial[0]
    cuda.syncthreads()  # type: ignore[call-arg]  # read by all before the slots are reused
    return total


@cuda.jit(device=True)
def lanes_reduce(partial, columns, lane, lanes) -> None:
    """Sum each of ``columns`` groups of the lanes' partial sums, ``partial[c * lanes + lane]``, into
    its first slot, once every lane has written its own."""
    cuda.syncthreads()  # type: ignore[call-arg]
    _lane_sums(partial, columns, lane, lanes)


def grid_1d(n: int) -> tuple:
    return ((n + BLOCK_1D - 1) // BLOCK_1D,), (BLOCK_1D,)


def grid_2d(m: int, n: int) -> tuple:
    bx, by = BLOCK_2D
    return ((m + bx - 1) // bx, (n + by - 1) // by), BLOCK_2D


class Launch:
    """``kernel[grid, block, 0, shared]`` applied at call time (``shared``: bytes of dynamic shared
    memory): the CUDA simulator's ``kernel[...]`` mutates and returns the kernel itself, so a
    configured kernel cannot be kept for later."""

    __slots__ = ("block", "grid", "kernel", "shared")

    def __init__(self, kernel, grid, block, shared: int = 0):
        if shared > MAX_DYNAMIC_SHARED:  # the driver's CUDA_ERROR_INVALID_VALUE, said before the launch
            raise ConfigError(
                f"{getattr(kernel, '__name__', kernel)}: {shared} bytes of dynamic shared memory, "
                f"more than the {MAX_DYNAMIC_SHARED} a launch gets without opting in"
            )
        self.kernel, self.grid, self.block, self.shared = kernel, grid, block, shared

    def __call__(self, *args) -> None:
        if _SIMULATOR:  # the simulator runs arguments that real numba.cuda refuses to type
            check_launch_arguments(self.kernel, args)
        self.kernel[self.grid, self.block, 0, self.shared](*args)


def refused_argument(value: object) -> str | None:
    """What real numba.cuda refuses about ``value`` as a kernel argument (None if it takes it):
    numbers, numpy scalars, device arrays and numpy arrays (copied in and back) are taken, tuples
    of those too; ``None`` and other objects are not (``NotImplementedError: (none, None)``)."""
    if value is None:
        return "None"
    if isinstance(value, (bool, int, float, complex, np.bool_, np.number, np.ndarray)):
        return None
    if hasattr(value, "__cuda_array_interface__") or (
        hasattr(value, "copy_to_host") and hasattr(value, "is_c_contiguous")
    ):
        return None  # a device array, real or simulated (not a dispatchrl Array: launch unwraps those)
    if isinstance(value, tuple):
        inner = [refused_argument(item) for item in value]
        return next((f"a tuple holding {why}" for why in inner if why), None)
    return f"an object of type {type(value).__name__}"


def check_launch_arguments(kernel, args: tuple) -> None:
    """Refuse (:class:`DeviceError`, naming the kernel and parameter) a launch of ``kernel`` with an
    argument real CUDA cannot take; the simulator would run it and hide the bug."""
    for index, value in enumerate(args):
        why = refused_argument(value)
        if why is not None:
            py = getattr(kernel, "py_func", None) or getattr(kernel, "fn", kernel)
            code = getattr(py, "__code__", None)
            names = code.co_varnames[: code.co_argcount] if code is not None else ()
            name = names[index] if index < len(names) else f"#{index}"
            raise DeviceError(
                f"{getattr(py, '__name__', kernel)!s}: argument {name!r} is {why}, which a real GPU's "
                "kernel launch refuses (the CUDA simulator would run it); pass an array or a number"
            )


def launch_1d(device: CUDA, kernel, n: int, *args) -> None:
    launch(device, Launch(kernel, *grid_1d(n)), *args)


def launch_2d(device: CUDA, kernel, shape: tuple, *args) -> None:
    launch(device, Launch(kernel, *grid_2d(*shape)), *args)


def launch_once(device: CUDA, kernel, *args) -> None:
    """``kernel`` on one thread (the grid form of :func:`once`)."""
    launch(device, Launch(kernel, (1,), (1,)), *args)


def flat(a: Array):
    """1-D view of an Array's device buffer, for elementwise kernels."""
    return a.data.reshape(a.size)


#: per-element kernel -> (its block-level device function, the literal sizes it takes): see block_form
BLOCK_FORMS: dict[Any, tuple[Any, Callable[..., tuple]]] = {}
#: kernel -> bytes of dynamic shared memory it needs, from its raw arguments. Dynamic shared memory
#: is one region per kernel whichever device functions declare it (``cuda.shared.array(0, dtype)``),
#: where a static array is allocated again for every inlined call: a fused step gives its block the
#: largest need among its calls, which run one after another.
DYNAMIC_SHARED: dict[Any, Callable[..., int]] = {}
#: kernel -> a call's work from its raw arguments, where that is not the product of its block form's
#: literal sizes (the products pass their staging depth as a literal too: their work is rows x cols x inner)
BLOCK_WORK: dict[Any, Callable[..., int]] = {}


def block_form(kernel, sizes: Callable[..., tuple] = lambda *args: ()) -> Callable:
    """Register the decorated ``@cuda.jit(device=True)`` function as ``kernel``'s block-level form:
    called by every thread of one block with ``kernel``'s arguments followed by ``sizes(*raw
    arguments)`` (shapes, which the fused kernel's source then holds as literals), it does the whole
    launch's work in block-stride loops (``cuda.threadIdx.x`` step ``cuda.blockDim.x``). The fused
    step puts a ``cuda.syncthreads()`` after it, so it need not end with one."""

    def register(device_function):
        BLOCK_FORMS[kernel] = (device_function, sizes)
        return device_function

    return register


def _kernel_of(operation) -> Any:
    return operation.kernel if isinstance(operation, Launch) else operation


def _kernel_name(operation) -> str:
    kernel = _kernel_of(operation)
    py = getattr(kernel, "py_func", kernel)
    return getattr(py, "__name__", repr(kernel))


def _is_device_array(value: object) -> bool:
    # numba device arrays, real or simulated (the simulator's lack __cuda_array_interface__)
    data = raw(value)
    return hasattr(data, "copy_to_host") and hasattr(data, "is_c_contiguous")


def _fusable_argument(value: object) -> bool:
    return isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating)) or _is_device_array(value)


def unfused_kernels(calls: list) -> list[str]:
    """Names of the recorded kernels that keep ``calls`` from becoming one block-level kernel: no
    block-level form registered, or an argument that is neither a device array nor a number."""
    missing: dict[str, None] = {}
    for operation, args in kernel_calls(calls):
        if _kernel_of(operation) not in BLOCK_FORMS or not all(_fusable_argument(a) for a in args):
            missing[_kernel_name(operation)] = None
    return list(missing)


def _memory_key(data) -> tuple:
    """Equal for views of the same memory with the same layout (``flat(x)`` made per call), so
    each becomes one kernel parameter: a fused step's parameters can outgrow CUDA's 4 KiB
    (32 KiB from CUDA 12.1) parameter space."""
    interface = getattr(data, "__cuda_array_interface__", None)
    if interface is None:  # the simulator's arrays wrap a host array
        interface = getattr(getattr(data, "_ary", None), "__array_interface__", None)
    if interface is None:
        return ("object", id(data))
    return (interface["data"][0], tuple(interface["shape"]), interface["typestr"], interface.get("strides"))


def block_work(calls: list) -> int:
    """The largest work among ``calls`` (see SINGLE_BLOCK_MAX_WORK): the product of a call's
    literal sizes, or its kernel's :data:`BLOCK_WORK`."""
    work = 0
    for operation, args in kernel_calls(calls):
        kernel = _kernel_of(operation)
        raws = [raw(a) for a in args]
        if kernel in BLOCK_WORK:
            work = max(work, int(BLOCK_WORK[kernel](*raws)))
        else:
            _, sizes = BLOCK_FORMS[kernel]
            work = max(work, int(np.prod([int(s) for s in sizes(*raws)], dtype=np.int64)))
    return work


def _literal(value: object) -> str:
    """A number argument as source that the CUDA target types as the per-element launch would:
    Python numbers as themselves (int64, float64), numpy scalars in their own dtype."""
    if isinstance(value, (bool, np.bool_)):
        return repr(bool(value))
    if isinstance(value, int):
        return repr(value)
    if isinstance(value, float):
        return repr(value) if np.isfinite(value) else f"float({str(value)!r})"
    scalar: Any = value
    number = _literal(scalar.item())
    return f"np.{scalar.dtype.name}({number})"


def block_program(calls: list, block_size: int | None = None) -> Program:
    """``calls`` as ONE generated numba.cuda kernel, launched once per ``run(n)`` on a single block of
    ``block_size`` threads (default :data:`FUSED_BLOCK`): each kernel's block-level form in order,
    a ``cuda.syncthreads()`` after each, the ``n`` steps looped inside, and ``when`` conditions read
    on the device. ``run.launches`` counts launches, ``run.source`` is the generated source."""
    block = FUSED_BLOCK if block_size is None else int(block_size)
    if block < MIN_FUSED_BLOCK or block > MAX_FUSED_BLOCK or block & (block - 1):
        raise ConfigError(
            f"block_program: block_size must be a power of two in [{MIN_FUSED_BLOCK}, {MAX_FUSED_BLOCK}], got {block}"
        )
    missing = unfused_kernels(calls)
    if missing:
        raise ConfigError(f"block_program: no block-level form for {', '.join(missing)}")
    functions: dict[Any, str] = {}
    arrays: dict[tuple, tuple[str, Any]] = {}
    conditions = iter(range(1 << 62))
    profile = PROFILE
    labels: list[str] = []

    def array_name(a):
        data = raw(a)
        return arrays.setdefault(_memory_key(data), (f"a{len(arrays)}", data))[0]

    def call(node, indent):
        operation, args = node
        device_function, sizes = BLOCK_FORMS[_kernel_of(operation)]
        name = functions.setdefault(device_function, f"f{len(functions)}")
        rendered = [array_name(a) if _is_device_array(a) else _literal(a) for a in args]
        literals = [str(int(s)) for s in sizes(*[raw(a) for a in args])]
        lines = [f"{indent}{name}({', '.join(rendered + literals)})", f"{indent}cuda.syncthreads()"]
        if profile:
            k = len(labels)
            labels.append(f"{_kernel_name(operation)}[{'x'.join(literals)}]")
            lines += [
                f"{indent}if cuda.threadIdx.x == 0:",
                f"{indent}    now = clock64()",
                f"{indent}    profile_cycles[{k}] += now - then",
                f"{indent}    profile_counts[{k}] += 1",
                f"{indent}    then = now",
            ]
        return lines

    def test(branch, indent):
        # every thread reads the counter before any thread of the branch may change it
        flag = f"c{next(conditions)}"
        condition = branch.condition.expression(array_name(branch.condition.counter))
        return [f"{indent}{flag} = {condition}", f"{indent}cuda.syncthreads()"], flag

    body = python_source(calls, "        ", call, test)
    if profile:
        cycles = cuda.to_device(np.zeros(max(1, len(labels)), np.int64))
        counts = cuda.to_device(np.zeros(max(1, len(labels)), np.int64))
        arrays[("profile", "cycles")] = ("profile_cycles", cycles)
        arrays[("profile", "counts")] = ("profile_counts", counts)
    shared = max(
        (
            DYNAMIC_SHARED[kernel](*[raw(a) for a in args])
            for operation, args in kernel_calls(calls)
            if (kernel := _kernel_of(operation)) in DYNAMIC_SHARED
        ),
        default=0,
    )
    parameter_bytes = 8 + sum(8 * (5 + 2 * data.ndim) for _, data in arrays.values())
    if parameter_bytes > MAX_PARAMETER_BYTES:
        raise ConfigError(
            f"block_program: {len(arrays)} arrays need {parameter_bytes} bytes of kernel parameters, "
            f"more than MAX_PARAMETER_BYTES = {MAX_PARAMETER_BYTES}"
        )
    params = "".join(f", {name}" for name, _ in arrays.values())
    source = "\n".join(
        [
            "# generated by dispatchrl.backends.cuda: one fused step in one thread block, do not edit",
            f"def fused_step(n{params}):",
            *(["    then = clock64()"] if profile else []),
            "    for _ in range(n):",
            *(body or ["        pass"]),
            "",
        ]
    )
    namespace: dict[str, Any] = {"cuda": cuda, "np": np, **{name: f for f, name in functions.items()}}
    if profile:
        namespace["clock64"] = _clock64()
    exec(compile(source, "<dispatchrl fused CUDA step>", "exec"), namespace)
    # the static check (benchmarks/cuda_static.py) compiles under the same cap and fails on spills
    options = {} if _SIMULATOR else {"max_registers": register_cap(block)}
    kernel = cuda.jit(**options)(namespace["fused_step"])
    buffers = [data for _, data in arrays.values()]
    launch_config = Launch(kernel, (1,), (block,), shared)
    fused = _simulated(launch_config) if _SIMULATOR else launch_config
    fused(0, *buffers)  # compile now, not on the first real call

    def run(n):
        if n > 0:
            fused(n, *buffers)
            run.launches += 1  # type: ignore[attr-defined]

    run.launches = 0  # type: ignore[attr-defined]
    run.kernels = 1  # type: ignore[attr-defined]
    run.source = source  # type: ignore[attr-defined]
    run.block_size = block  # type: ignore[attr-defined]
    run.parameter_bytes = parameter_bytes  # type: ignore[attr-defined]
    run.dynamic_shared_bytes = shared  # type: ignore[attr-defined]
    if profile:
        run.profile_labels = labels  # type: ignore[attr-defined]
        run.read_profile = lambda: (cycles.copy_to_host(), counts.copy_to_host())  # type: ignore[attr-defined]
        PROFILED.append(run)
    return run


def _special_register(name: str, bits: int) -> Any:
    """A device function returning the PTX special register ``%name`` (``tid.x``, ``clock64``) as
    an unsigned ``bits``-bit integer read by volatile inline PTX: NVVM may neither merge two reads
    nor move one out of a loop or to the kernel's start, as it does with its own intrinsics, which
    it takes for pure."""
    from llvmlite import ir

    try:  # numba-cuda has its own typing and extension API
        from numba.cuda import types as cuda_types
        from numba.cuda.extending import intrinsic
    except ImportError:  # pragma: no cover - numba's built-in CUDA target
        from numba.core import types as cuda_types
        from numba.core.extending import intrinsic  # type: ignore[assignment]

    @intrinsic
    def read(typingctx):
        def codegen(context, builder, signature, args):
            fnty = ir.FunctionType(ir.IntType(bits), [])
            constraint = "=l" if bits == 64 else "=r"
            return builder.asm(fnty, f"mov.u{bits} $0, %{name};", constraint, [], side_effect=True)

        return (cuda_types.int64 if bits == 64 else cuda_types.int32)(), codegen

    return read


def _clock64() -> Any:
    """A device function returning the SM's 64-bit cycle counter (PTX ``%clock64``), which
    numba-cuda does not expose; under the simulator, the host's nanoseconds."""
    if _SIMULATOR:
        import time

        return time.perf_counter_ns
    return _special_register("clock64", 64)


def _thread_index() -> Any:
    if _SIMULATOR:  # the running launch's fake module, not the ``cuda`` global the simulator swaps per call
        from numba.cuda.simulator.kernel import _get_kernel_context

        return lambda: _get_kernel_context().threadIdx.x
    return _special_register("tid.x", 32)


#: ``cuda.threadIdx.x`` for block forms, read afresh at each call. NVVM hoists the sreg read and
#: every address computed from it (``base + tid * itemsize`` of each array a call strides over) to
#: the fused kernel's start and keeps them live through the whole step: TD3's step took 204
#: registers at 256 threads and spilled under 512 threads' cap of 128; with this read, 138 and none.
thread_index = _thread_index()


def _simulated(fused: Launch) -> Callable[..., None]:
    """``fused`` for the CUDA simulator, with ``cuda`` in every block form's module set to one fake
    module for the whole launch. The simulator swaps it in per device-function call and swaps it
    back on return, so a thread still inside a block form of another module than the kernel's would
    find the real module (and no ``cuda.blockDim``) once another thread returns first."""
    from numba.cuda.simulator.kernelapi import FakeCUDAModule, swapped_cuda_module

    def run(*args):
        fake = FakeCUDAModule((1, 1, 1), (fused.block[0], 1, 1), fused.shared)
        # the block forms' modules, and those of the element bodies they were generated from
        forms = [f for f, _ in BLOCK_FORMS.values()]
        forms += [f.fn.__globals__["_body"] for f in forms if "_body" in f.fn.__globals__]
        modules = {id(f.fn.__globals__): f.fn for f in forms}
        with contextlib.ExitStack() as stack:
            for fn in modules.values():
                stack.enter_context(swapped_cuda_module(fn, fake))
            fused(*args)

    return run


@compile_step.dispatch
def compile_step(device: CUDA, calls: list) -> Program:
    # One single-block kernel when every call has a block-level form and the shapes are small;
    # otherwise the prepared loop of launches for the whole step, saying why it did not fuse
    missing = unfused_kernels(calls)
    if not missing:
        work = block_work(calls)
        if work <= SINGLE_BLOCK_MAX_WORK:
            try:
                return block_program(calls)
            except ConfigError as too_many:  # more arrays than one kernel's parameters hold
                reason = str(too_many)
        else:
            reason = f"largest call does {work} > SINGLE_BLOCK_MAX_WORK = {SINGLE_BLOCK_MAX_WORK} units of work"
    else:
        reason = f"no block-level form for {', '.join(missing)}"
    run = python_program(calls)
    run.unfused = missing  # type: ignore[attr-defined]
    run.fallback = reason  # type: ignore[attr-defined]
    return run
