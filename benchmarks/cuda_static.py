"""What the fused CUDA kernels cost on an H100, without a GPU: resources, SASS and a written-down model.

For the default TD3, SAC and PPO (Pendulum) programs and the ``dispatchrl demo`` step:

1. **Build** (in this process, ``NUMBA_ENABLE_CUDASIM=1``): each program as ``train()`` (or the
   demo) builds it, stopped before its first step. Every simulated kernel launch is recorded, so
   each fused kernel comes with its generated source (``run.source``), its device functions
   (module, qualname), the parameter types real numba-cuda would give its arguments, its block
   size and dynamic shared memory. Each recorded call of the step gives its block form's name and
   literal sizes (so its multiply-adds), and thread 0 of the block runs each call once on copies
   of its arrays (:class:`ThreadZero`), counting the barriers and Python lines it executes.
   Branch weights (how often each call runs per step) come from replaying the step's ``Below`` /
   ``Every`` conditions over the first ``--replay-steps`` steps from the initial state, with the
   counters advanced by the recorded ``increment`` calls.
2. **Compile** (a subprocess per compute capability, simulator off, real numba-cuda, no driver):
   ``cuda.compile_ptx(fused_step, signature, cc=...)`` on the same source with the real block
   forms (compiling device functions asks numba for the current device: a stand-in reports the
   target compute capability), then ``ptxas -v`` and, when found, ``nvdisasm -c`` for the SASS.
   Tools: ``DISPATCHRL_PTXAS`` (ptxas), ``DISPATCHRL_CUDA_BIN`` (a folder with ptxas, nvdisasm,
   cuobjdump), then the ``nvidia-*`` wheels in the compiling Python's site-packages, then ``PATH``.
   The compiling Python is ``--python`` or ``DISPATCHRL_CUDA_PYTHON`` (default: this one).
3. **Predict** the time per step with :func:`predict` (see its docstring and docs/DESIGN.md).

``--json`` prints one line per kernel and compute capability with the keys ``program, cc,
registers, spill_stores, spill_loads, stack_bytes, shared_bytes, block, sass_per_mac, lds,
barriers_per_step, predicted_us`` and more (``max_block``, ``launchable``, ``macs_per_step``, ...);
without it, a table.

    python benchmarks/cuda_static.py [--json] [--programs td3,sac,ppo,demo] [--cc 90,80]
                                     [--python PY] [--out DIR] [--replay-steps 10000] [--calls]

``--calls`` adds a JSON line per block form and (dense) sizes of each kernel: its runs per step
and its share of ``predicted_us`` (:func:`call_rows`).

Counted quantities (exactly):

- ``sass_per_mac``: over the dense loops of the kernel's SASS (a backward branch's range is a
  loop; a dense loop holds multiply-adds of its own, outside the loops nested in it: ``FFMA``,
  ``HFMA2``, or ``FMUL`` with ``DADD``, a float32 product accumulated in float64; and no global
  store, ``STG``, which an elementwise loop does every pass), the sum of their instructions (target
  label to branch, inclusive, nested loops such as the tiles' staging counted once) divided by the
  sum of their own multiply-adds per pass. For the tiled products that is one pass over ``stage``
  inner indices: staging, barriers and the unrolled 4 x 4 outer products. Each loop counts once
  (not weighted by trip count); a dense call whose inner extent the compiler unrolled completely
  has no loop of its own and is not counted. ``None`` without SASS.
- ``lds``: ``LDS*`` instructions (any width, ``LDSM`` included) in the whole SASS listing.
- ``barriers_per_step``: ``cuda.syncthreads()`` executed per step by thread 0: the one the fused
  kernel puts after every call and before every branch (from the generated source's structure,
  each weighted by how often it runs), plus the barriers inside each call's block form, counted
  by running that call once on thread 0 (loops inside a form count every pass).
"""

import argparse
import contextlib
import dataclasses
import glob
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ("td3", "sac", "ppo", "demo")
KEYS = (
    "program",
    "cc",
    "registers",
    "spill_stores",
    "spill_loads",
    "stack_bytes",
    "shared_bytes",
    "block",
    "sass_per_mac",
    "lds",
    "barriers_per_step",
    "predicted_us",
)
#: block forms whose literal sizes are (rows, cols, inner): multiply-adds = rows × cols × inner,
#: rows × cols outputs (by the kernel name the form belongs to, stem before ``_kernel``)
DENSE_KERNELS = ("dense_forward", "weight_gradient", "input_gradient", "matmul")
#: sm_80/sm_90: registers per SM (and at most per block), allocated per warp in units of 256;
#: static shared memory a block may declare without opting in
REGISTERS_PER_SM = 65536
REGISTER_UNIT = 256
MAX_THREADS = 1024
STATIC_SHARED_LIMIT = 48 * 1024

# ---------------------------------------------------------------- the performance model
#: H100 SXM clock under a one-SM load (the GPU is far below its power limit: full boost, 1.98 GHz;
#: 1.755 GHz is its sustained boost under load, which makes every figure 13 % longer)
CLOCK_GHZ = 1.98
#: warp-instructions issued per clock per SM (4 schedulers, one each)
ISSUE_PER_CLOCK = 4
#: average cycles between two instructions of one warp when too few warps share a scheduler to
#: hide latency (dependent FP32/INT issue alone is 4 cycles on sm_80/sm_90; loads and FP64 add
#: more). The one fitted constant: 5.4 puts the measured demo step (515 µs, H100, Nov 2026) on the
#: model; a priori 4.0 predicted 0.74-0.79 of the three measured figures (docs/DESIGN.md)
LATENCY_CPI = 5.4
#: shared-memory bandwidth per SM (32 banks × 4 bytes per clock)
SHARED_BYTES_PER_CLOCK = 128
#: a barrier between calls: the next call's first loads go to L2 (~260 cycles on H100) after every
#: warp arrived, plus the barrier itself and the tail of the last stores
PHASE_CYCLES = 400
#: a barrier inside a block form (shared-memory reductions and tiles): the barrier and one
#: shared-memory round trip
INNER_BARRIER_CYCLES = 60
#: SASS instructions per Python line a thread executes outside the dense loops (elementwise
#: bodies, reductions, bookkeeping: 64-bit indexing, a load or two, a few FP64 operations)
SASS_PER_LINE = 10
#: one launch from Python by numba-cuda (argument marshalling of ~100 arrays included); paid
#: once per ``step(n)`` call, so per step it is divided by the steps a call runs
LAUNCH_US = 30.0


@dataclasses.dataclass
class Call:
    """One recorded call of a fused step, as the model sees it."""

    form: str  # the block form's name
    sizes: tuple  # its literal sizes
    weight: float  # runs per step (branch replay)
    macs: int  # multiply-adds per run (dense forms), else 0
    parallel: int  # independent units the block strides over (outputs, elements; 1 for single-thread work)
    barriers: int | None  # barriers inside the form per run, by thread 0 (None: the run failed)
    lines: int | None  # Python lines thread 0 executes per run
    thread_macs: int = 0  # multiply-adds the busiest thread executes per run, tile padding included
    busy_threads: int = 0  # threads with multiply-adds to do


@dataclasses.dataclass
class FusedKernel:
    """A fused kernel as built in the simulator: everything the compile and the model need."""

    program: str
    source: str
    functions: dict  # name in the source -> [module, qualname] of its block form
    params: list  # per array parameter: [dtype str, ndim, layout, shape]
    block: int
    dynamic_shared: int
    calls: list  # of Call
    branches_per_step: float  # branch conditions evaluated per step (one barrier each)
    steps_per_launch: int

    def macs_per_step(self) -> float:
        return sum(c.weight * c.macs for c in self.calls)

    def barriers_per_step(self) -> float | None:
        if any(c.barriers is None for c in self.calls):
            return None
        return self.branches_per_step + sum(c.weight * (1 + c.barriers) for c in self.calls)


# ---------------------------------------------------------------- building (simulator)


def _require_simulator() -> None:
    import numba

    if not getattr(numba.config, "ENABLE_CUDASIM", 0):
        raise RuntimeError("cuda_static: building needs NUMBA_ENABLE_CUDASIM=1 set before numba is imported")


@dataclasses.dataclass
class LaunchRecord:
    name: str
    block: tuple
    dynamic_shared: int
    args: tuple
    globals: dict


@contextlib.contextmanager
def recorded_launches() -> Iterator[list]:
    """Every kernel launch the simulator runs inside the block (not device-function calls)."""
    from numba.cuda.simulator import kernel as sim

    records: list[LaunchRecord] = []
    original = sim.FakeCUDAKernel.__call__

    def call(self: Any, *args: Any) -> Any:
        if not self._device:
            name = getattr(self.fn, "__name__", repr(self.fn))
            block = tuple(self.block_dim)
            records.append(LaunchRecord(name, block, int(self.dynshared_size or 0), args, self.fn.__globals__))
        return original(self, *args)

    sim.FakeCUDAKernel.__call__ = call
    try:
        yield records
    finally:
        sim.FakeCUDAKernel.__call__ = original


class _Built(Exception):
    def __init__(self, loop: Any) -> None:
        super().__init__("built")
        self.loop = loop


def _train_steps(program: str) -> list[tuple[str, Any, int]]:
    """(name, fused Step, steps per launch) of ``train(algo, CUDA(), env)`` with the env's default
    config, built by train() itself and stopped before its first chunk runs; ``program`` is
    ``algo`` (Pendulum) or ``algo:env`` (e.g. ``ppo:cartpole``, ``dqn:cartpole``), optionally
    with config fields set as ``+field=JSON`` (``dqn:cartpole+dueling=true+prioritized=true``)."""
    import dataclasses
    import json

    import dispatchrl as drl
    from dispatchrl.training import chunks, driver

    head, *settings = program.split("+")
    algo_name, _, env = head.partition(":")
    env = env or "pendulum"
    algo = getattr(drl, algo_name)
    fields = {key: json.loads(value) for key, _, value in (pair.partition("=") for pair in settings)}
    config = dataclasses.replace(algo.config_for(env), **fields)
    original = driver._NativeLoop.run

    def stop(self: Any, iterations: int) -> None:
        raise _Built(self)

    driver._NativeLoop.run = stop
    try:
        driver.train(algo, drl.CUDA(), env, config, progress=False)
    except _Built as built:
        loop = built.loop
    finally:
        driver._NativeLoop.run = original
    schedule = algo.schedule(config)
    spec = drl.training.envspec.resolve_env(env, config.num_envs)
    iterations = config.total_steps // (config.num_envs * schedule.env_steps)
    chunk = chunks.chunk_iterations(spec, schedule, iterations)
    if loop.update is None:  # the driver's whole chunk in one call
        return [(program, loop.env_step, chunk * schedule.env_steps)]
    return [
        (f"{program}.rollout", loop.env_step, schedule.env_steps),
        (f"{program}.update", loop.update, schedule.updates),
    ]


#: ``dispatchrl demo``'s defaults (cli.py): an MLP 4-64-64-1, batch 100, 2000 steps
DEMO_BATCH, DEMO_STEPS = 100, 2000


def _demo_step() -> list[tuple[str, Any, int]]:
    """The ``dispatchrl demo`` step on CUDA, built as cli.demo builds it (no step run)."""
    import dispatchrl as drl
    from dispatchrl import nn

    step, _, _, _ = nn.regression_demo(drl.CUDA(), DEMO_BATCH)
    return [("demo", step, DEMO_STEPS - 1)]


def _layer_step() -> list[tuple[str, Any, int]]:
    """benchmarks/cpu_vs_gpu.py's dense layer step (forward + backward, 64 × 64, batch 100): a
    second figure measured on the H100 (not in the default programs)."""
    import importlib.util

    import dispatchrl as drl

    spec = importlib.util.spec_from_file_location("cpu_vs_gpu", Path(__file__).resolve().parent / "cpu_vs_gpu.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # its timing grows n until one call takes ~40 ms: the launch is paid once per ~100 steps
    return [("layer64", module.make_step(drl.CUDA(), 64, 100), 100)]


def _layout(data: Any) -> str:
    if data.is_c_contiguous():
        return "C"
    return "F" if data.is_f_contiguous() else "A"


def build(program: str, replay_steps: int = 10_000, launches: list | None = None) -> list[FusedKernel]:
    """The fused kernels of ``program`` (td3, sac, ppo, demo), built in the simulator; every kernel
    launch made while building (state, networks, the fused kernels' first compile) is appended to
    ``launches`` as a :class:`LaunchRecord`."""
    _require_simulator()
    from dispatchrl.backends import cuda as cuda_backend

    # the block a GPU gets (the simulator's default is smaller: its threads are Python threads)
    simulated_block, cuda_backend.FUSED_BLOCK = cuda_backend.FUSED_BLOCK, cuda_backend.HARDWARE_FUSED_BLOCK
    try:
        with recorded_launches() as recorded:
            steps = {"demo": _demo_step, "layer64": _layer_step}.get(program, lambda: _train_steps(program))()
    finally:
        cuda_backend.FUSED_BLOCK = simulated_block
    if launches is not None:
        launches += recorded
    launches = recorded
    fused = [r for r in launches if r.name == "fused_step"]
    programs = [(name, step, per_launch) for name, step, per_launch in steps if hasattr(step._run, "source")]
    if len(fused) != len(programs):
        raise RuntimeError(f"{program}: {len(programs)} fused programs but {len(fused)} fused launches recorded")
    kernels = []
    for (name, step, per_launch), record in zip(programs, fused):
        run = step._run
        namespace = record_namespace(run.source, record)
        params = [[a.dtype.str, a.ndim, _layout(a), list(a.shape)] for a in record.args[1:]]
        calls, branches = step_calls(step.calls, record.block[0], record.dynamic_shared, replay_steps)
        kernels.append(
            FusedKernel(
                program=name,
                source=run.source,
                functions=namespace,
                params=params,
                block=int(record.block[0]),
                dynamic_shared=record.dynamic_shared,
                calls=calls,
                branches_per_step=branches,
                steps_per_launch=int(per_launch),
            )
        )
    return kernels


def record_namespace(source: str, record: LaunchRecord) -> dict:
    """name in the generated source -> [module, qualname] of the block form it calls (the fused
    kernel's globals hold its device functions under those names)."""
    used = set(re.findall(r"\b(f\d+)\(", source))
    out = {}
    for name in sorted(used):
        py = record.globals[name].fn
        out[name] = [py.__module__, py.__qualname__]
    return out


def form_name(form: Any) -> str:
    py = getattr(form, "py_func", None) or getattr(form, "fn", form)
    return py.__name__


def kernel_stem(kernel: Any) -> str:
    py = getattr(kernel, "py_func", None) or getattr(kernel, "fn", kernel)
    return py.__name__.removesuffix("_kernel")


def step_calls(nodes: list, block: int, dynamic_shared: int, replay_steps: int) -> tuple[list[Call], float]:
    """The calls of a traced step with their weights per step, and the branch tests per step."""
    from dispatchrl.backends.cuda import BLOCK_FORMS, Launch
    from dispatchrl.kernels.core.cuda import increment_kernel
    from dispatchrl.staging import Branch, raw

    def kernel_of(operation: Any) -> Any:
        return operation.kernel if isinstance(operation, Launch) else operation

    counters: dict[tuple, int] = {}
    weights: dict[int, float] = {}
    branch_tests = 0

    def key(array: Any, index: int) -> tuple:
        return (id(raw(array)), int(index))

    def visit(items: list) -> None:
        for node in items:
            if isinstance(node, Branch):
                counters.setdefault(key(node.condition.counter, 0), int(raw(node.condition.counter)[0]))
                visit(node.then)
                visit(node.otherwise)
            elif kernel_of(node[0]) is increment_kernel:
                counters.setdefault(key(node[1][0], node[1][1]), int(raw(node[1][0])[int(node[1][1])]))

    def walk(items: list) -> None:
        nonlocal branch_tests
        for node in items:
            if isinstance(node, Branch):
                branch_tests += 1
                value = counters[key(node.condition.counter, 0)]
                walk(node.then if node.condition.holds(value) else node.otherwise)
            else:
                weights[id(node)] = weights.get(id(node), 0) + 1
                operation, args = node
                if kernel_of(operation) is increment_kernel:
                    counters[key(args[0], args[1])] += int(args[2])

    visit(nodes)
    for _ in range(replay_steps):
        walk(nodes)
    from dispatchrl.staging import kernel_calls

    copies: dict[int, np.ndarray] = {}
    calls = []
    for node in kernel_calls(nodes):
        operation, args = node
        form, sizes_of = BLOCK_FORMS[kernel_of(operation)]
        raws = [raw(a) for a in args]
        sizes = tuple(int(s) for s in sizes_of(*raws))
        stem = kernel_stem(kernel_of(operation))
        thread_macs = busy = 0
        if stem in DENSE_KERNELS:
            macs, parallel = int(np.prod(sizes[:3])), sizes[0] * sizes[1]
            thread_macs, busy = product_work(sizes, block)
        else:
            macs, parallel = 0, int(np.prod(sizes)) if sizes else 1
        barriers, lines = thread_zero_run(form, raws, sizes, block, dynamic_shared, copies)
        weight = weights.get(id(node), 0) / replay_steps
        calls.append(Call(form_name(form), sizes, weight, macs, parallel, barriers, lines, thread_macs, busy))
    return calls, branch_tests / replay_steps


class _Dim3:
    def __init__(self, x: int, y: int = 1, z: int = 1) -> None:
        self.x, self.y, self.z = x, y, z


class ThreadZero:
    """A ``cuda`` module for running a block form as thread 0 of a one-block launch alone: what the
    other threads would do is not done, barriers are counted, shared and local arrays are zeros."""

    def __init__(self, block: int, dynamic_shared: int) -> None:
        self.threadIdx, self.blockIdx = _Dim3(0, 0, 0), _Dim3(0, 0, 0)
        self.blockDim, self.gridDim = _Dim3(block), _Dim3(1)
        self.warpsize, self.laneid = 32, 0
        self.barriers = 0
        self.dynamic_shared = dynamic_shared
        self.shared = _Memory(self)
        self.local = _Memory(self)
        self.atomic = _Atomic()
        self.const = _Memory(self)

    def syncthreads(self) -> None:
        self.barriers += 1

    def syncthreads_count(self, predicate: Any) -> int:
        self.barriers += 1
        return int(bool(predicate))

    def syncthreads_and(self, predicate: Any) -> int:
        return self.syncthreads_count(predicate)

    def syncthreads_or(self, predicate: Any) -> int:
        return self.syncthreads_count(predicate)

    def syncwarp(self, mask: int = 0xFFFFFFFF) -> None:
        pass

    def threadfence(self) -> None:
        pass

    threadfence_block = threadfence_system = threadfence

    def grid(self, ndim: int) -> Any:
        return 0 if ndim == 1 else (0,) * ndim

    def gridsize(self, ndim: int) -> Any:
        return self.blockDim.x if ndim == 1 else (self.blockDim.x,) + (1,) * (ndim - 1)

    def shfl_down_sync(self, mask: int, value: Any, delta: int) -> Any:
        return value

    shfl_up_sync = shfl_xor_sync = shfl_down_sync

    def shfl_sync(self, mask: int, value: Any, lane: int) -> Any:
        return value


class _Memory:
    def __init__(self, module: ThreadZero) -> None:
        self.module = module

    def array(self, shape: Any, dtype: Any) -> np.ndarray:
        dtype = np.dtype(getattr(dtype, "name", dtype) if not isinstance(dtype, np.dtype) else dtype)
        if shape == 0:  # dynamic shared memory: what the launch asked for
            return np.zeros(max(self.module.dynamic_shared // dtype.itemsize, 1), dtype)
        return np.zeros(shape, dtype)

    def array_like(self, ary: Any) -> Any:
        return ary


class _Atomic:
    def __getattr__(self, name: str) -> Callable[..., Any]:
        ops = {"add": np.add, "sub": np.subtract, "max": np.maximum, "min": np.minimum}

        def update(ary: Any, index: Any, value: Any, *more: Any) -> Any:
            old = ary[index]
            if name in ops:
                ary[index] = ops[name](old, value)
            elif name in ("exch",):
                ary[index] = value
            elif name in ("cas", "compare_and_swap") and old == value:
                ary[index] = more[0]
            return old

        return update


#: where kernel code lives: dispatchrl's files and the sources it generates ("<dispatchrl ...>")
_KERNEL_FILES = (str(ROOT / "dispatchrl"), "<dispatchrl")


def thread_zero_run(
    form: Any, raws: list, sizes: tuple, block: int, dynamic_shared: int, copies: dict
) -> tuple[int | None, int | None]:
    """(barriers, Python lines) thread 0 executes in one run of ``form`` with these arguments (on
    copies of the arrays); (None, None) if the run fails."""
    from numba.cuda.simulator import kernel as sim
    from numba.cuda.simulator.kernelapi import swapped_cuda_module

    def host(value: Any) -> Any:
        if hasattr(value, "copy_to_host"):
            if id(value) not in copies:
                copies[id(value)] = value.copy_to_host()
            return copies[id(value)]
        return value

    module = ThreadZero(block, dynamic_shared)
    lines = 0

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        # only the kernels' own lines: not the simulator's (device-function calls go through it)
        nonlocal lines
        if event == "call":
            return tracer if frame.f_code.co_filename.startswith(_KERNEL_FILES) else None
        if event == "line":
            lines += 1
        return tracer

    args = [host(a) for a in raws] + list(sizes)
    previous = sys.gettrace()
    try:
        with sim._push_kernel_context(module), swapped_cuda_module(form.fn, module), np.errstate(all="ignore"):
            sys.settrace(tracer)
            try:
                form(*args)
            finally:
                sys.settrace(previous)
    except Exception:  # a form this runner cannot emulate: the model says so (None)
        return None, None
    return module.barriers, lines


# ---------------------------------------------------------------- compiling (real numba-cuda)


def _site_packages(python: str) -> list[Path]:
    out = subprocess.run(
        [python, "-c", "import site, sys; print('\\n'.join(site.getsitepackages() + [site.getusersitepackages()]))"],
        capture_output=True,
        text=True,
    )
    return [Path(p) for p in out.stdout.split()]


def find_tool(name: str, python: str) -> str | None:
    """``name`` (ptxas, nvdisasm, cuobjdump): DISPATCHRL_PTXAS (ptxas only), DISPATCHRL_CUDA_BIN,
    the nvidia wheels in ``python``'s site-packages (cuda_nvcc's ptxas; the CUDA 13 wheels'
    cu13/bin), then PATH."""
    if name == "ptxas" and os.environ.get("DISPATCHRL_PTXAS"):
        return os.environ["DISPATCHRL_PTXAS"]
    candidates = []
    if os.environ.get("DISPATCHRL_CUDA_BIN"):
        candidates.append(Path(os.environ["DISPATCHRL_CUDA_BIN"]) / name)
    for site in _site_packages(python):
        candidates += [Path(p) for p in sorted(glob.glob(str(site / "nvidia" / "*" / "bin" / name)))]
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return shutil.which(name)


def real_compiler(python: str) -> str | None:
    """Why ``python`` cannot compile for real (None when it can): the numba-cuda package (not the
    CUDA target numba itself still ships, which compiles differently) must import with the
    simulator off."""
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0", "PYTHONPATH": str(ROOT)}
    probe = "import numba.cuda, numba.cuda.dispatcher; from numba.cuda import compile_ptx; print(numba.cuda.__file__)"
    out = subprocess.run([python, "-c", probe], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        return f"{python} cannot import real numba-cuda: {(out.stderr.strip().splitlines() or ['?'])[-1]}"
    if "numba_cuda" not in out.stdout:
        return f"{python} has numba's built-in CUDA target ({out.stdout.strip()}), not the numba-cuda package"
    return None


def compile_worker(spec_path: str) -> None:
    """Subprocess entry (simulator off): compile every kernel of the spec for one cc to PTX."""
    assert os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "0"
    import importlib

    import numba.cuda.dispatcher as dispatcher
    from numba import cuda, types
    from numba.np.numpy_support import from_dtype

    spec = json.loads(Path(spec_path).read_text())
    major, minor = divmod(int(spec["cc"]), 10)

    class StandIn:  # device functions' compile asks the current device for its compute capability only
        compute_capability = (major, minor)

    dispatcher.get_current_device = lambda: StandIn
    import dispatchrl.devices

    for module in dispatchrl.devices.CUDA.method_modules:  # what CUDA() imports, without a GPU check
        importlib.import_module(module)
    from dispatchrl.backends.cuda import BLOCK_FORMS

    by_name = {}
    for form, _ in BLOCK_FORMS.values():
        by_name[(form.py_func.__module__, form.py_func.__qualname__)] = form
    for kernel in spec["kernels"]:
        namespace: dict = {"cuda": cuda, "np": np}
        for name, (module, qualname) in kernel["functions"].items():
            namespace[name] = by_name[(module, qualname)]
        exec(compile(kernel["source"], "<dispatchrl fused CUDA step>", "exec"), namespace)
        signature = (types.int64,) + tuple(
            types.Array(from_dtype(np.dtype(dtype)), ndim, layout) for dtype, ndim, layout, _ in kernel["params"]
        )
        start = time.perf_counter()
        ptx, _ = cuda.compile_ptx(namespace["fused_step"], signature, device=False, cc=(major, minor))
        Path(kernel["ptx"]).write_text(ptx)
        print(json.dumps({"ptx": kernel["ptx"], "seconds": round(time.perf_counter() - start, 1)}), flush=True)


def ptxas_resources(log: str) -> dict:
    """registers, spills, stack, static shared memory of the fused kernel from ``ptxas -v``."""
    lines = log.splitlines()
    for i, line in enumerate(lines):
        if "Function properties for" in line and "fused_step" in line:
            frame = re.search(
                r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", lines[i + 1]
            )
            used = next(
                (
                    lines[k]
                    for k in range(i + 1, min(i + 4, len(lines)))
                    if "Used" in lines[k] and "registers" in lines[k]
                ),
                "",
            )
            registers = re.search(r"Used (\d+) registers", used)
            smem = re.search(r"(\d+) bytes smem", used)
            if frame and registers:
                return {
                    "registers": int(registers.group(1)),
                    "stack_bytes": int(frame.group(1)),
                    "spill_stores": int(frame.group(2)),
                    "spill_loads": int(frame.group(3)),
                    "shared_bytes": int(smem.group(1)) if smem else 0,
                }
    raise RuntimeError("ptxas -v: no resource lines for fused_step:\n" + log[-2000:])


def sass_instructions(listing: str) -> tuple[list[tuple[str, str]], dict[str, int]]:
    """(opcode, text) per instruction of an ``nvdisasm -c`` listing and label -> instruction index."""
    instructions: list[tuple[str, str]] = []
    labels: dict[str, int] = {}
    for line in listing.splitlines():
        label = re.match(r"^\s*(\.L_x_\d+):", line)
        if label:
            labels[label.group(1)] = len(instructions)
            continue
        op = re.match(r"\s*/\*[0-9a-f]+\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
        if op:
            instructions.append((op.group(2), line))
    return instructions, labels


def sass_stats(listing: str) -> dict:
    """sass_per_mac, lds and the dense loops' shared-memory bytes per multiply-add (see the module
    docstring for exactly what is counted)."""
    instructions, labels = sass_instructions(listing)
    loops = []
    for index, (op, text) in enumerate(instructions):
        if op.startswith("BRA"):
            target = re.search(r"`\((\.L_x_\d+)\)", text)
            if target and labels.get(target.group(1), 1 << 62) <= index:
                loops.append((labels[target.group(1)], index))
    loop_instructions = macs = lds_bytes = mac_loops = 0
    for a, b in loops:
        nested = [(c, d) for c, d in loops if a <= c and d <= b and (c, d) != (a, b)]
        direct = [k for k in range(a, b + 1) if not any(c <= k <= d for c, d in nested)]
        ops = [instructions[k][0].split(".")[0] for k in direct]
        count = {name: ops.count(name) for name in ("FFMA", "HFMA2", "FMUL", "DADD")}
        loop_macs = count["FFMA"] + count["HFMA2"] + min(count["FMUL"], count["DADD"])
        # an elementwise loop stores to global memory every pass, a dense one accumulates in
        # registers; float64 DFMA alone is other math (exp, log polynomials), not a product here
        if loop_macs == 0 or any(instructions[k][0].startswith("STG") for k in range(a, b + 1)):
            continue
        mac_loops += 1
        loop_instructions += b + 1 - a  # a pass, its staging loops (nested) counted once
        macs += loop_macs
        for k in direct:
            op = instructions[k][0]
            if op.startswith("LDS"):
                width = re.search(r"\.(32|64|128)\b", op)
                lds_bytes += int(width.group(1)) // 8 if width else 4
    lds = sum(1 for op, _ in instructions if op.startswith("LDS"))
    # where the compiler unrolled every product completely (no dense loop), the model falls back
    # on the whole kernel's instructions per multiply-add: an upper bound (elementwise code counts)
    all_macs = sum(op.startswith(("FFMA", "HFMA2")) for op, _ in instructions)
    return {
        "sass_per_mac": round(loop_instructions / macs, 2) if macs else None,
        "kernel_sass_per_mac": round(len(instructions) / all_macs, 2) if all_macs else None,
        "lds": lds,
        "lds_bytes_per_mac": round(lds_bytes / macs, 3) if macs else 0.0,
        "mac_loops": mac_loops,
        "sass_instructions": len(instructions),
    }


def compile_kernels(
    kernels: list[FusedKernel],
    ccs: tuple[int, ...],
    python: str,
    out: Path,
    log: Callable[[str], None] = print,
    disassemble: bool = True,
) -> dict[tuple[int, int], dict]:
    """(kernel index, cc) -> resources (and, with ``disassemble`` and nvdisasm found, SASS
    statistics) of each kernel for each cc."""
    from dispatchrl.backends.cuda import register_cap

    ptxas = find_tool("ptxas", python)
    if ptxas is None:
        raise RuntimeError("ptxas not found: set DISPATCHRL_PTXAS or install nvidia-cuda-nvcc (the [cuda] extra)")
    nvdisasm = find_tool("nvdisasm", python) if disassemble else None
    results: dict[tuple[int, int], dict] = {}
    env = {
        **os.environ,
        "NUMBA_ENABLE_CUDASIM": "0",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    for cc in ccs:
        spec = {
            "cc": cc,
            "kernels": [
                {**dataclasses.asdict(k), "calls": None, "ptx": str(out / f"{k.program}.sm{cc}.ptx")} for k in kernels
            ],
        }
        spec_path = out / f"spec.sm{cc}.json"
        spec_path.write_text(json.dumps(spec))
        done = subprocess.run(
            [python, str(Path(__file__).resolve()), "--compile-worker", str(spec_path)],
            capture_output=True,
            text=True,
            env=env,
        )
        if done.returncode != 0:
            raise RuntimeError(f"compiling for sm_{cc} failed:\n{done.stderr[-4000:]}")
        for index, kernel in enumerate(kernels):
            ptx = out / f"{kernel.program}.sm{cc}.ptx"
            cubin = ptx.with_suffix(".cubin")
            # block_program's cap: a larger block shows the spills it gets at run time
            cap = str(register_cap(kernel.block))
            ran = subprocess.run(
                [ptxas, "-v", "--gpu-name", f"sm_{cc}", "-maxrregcount", cap, "-o", str(cubin), str(ptx)],
                capture_output=True,
                text=True,
            )
            if ran.returncode != 0:
                raise RuntimeError(f"ptxas sm_{cc} {kernel.program}: {ran.stderr[-2000:]}")
            result = ptxas_resources(ran.stdout + ran.stderr)
            if nvdisasm:
                listing = subprocess.run([nvdisasm, "-c", str(cubin)], capture_output=True, text=True).stdout
                ptx.with_suffix(".sass").write_text(listing)
                result.update(sass_stats(listing))
            else:
                result.update({"sass_per_mac": None, "lds": None, "lds_bytes_per_mac": 0.0})
            results[(index, cc)] = result
            log(f"sm_{cc} {kernel.program}: {result['registers']} registers, sass/MAC {result.get('sass_per_mac')}")
    return results


def max_block(registers: int) -> int:
    """The largest block (a multiple of 32 threads) whose registers fit one SM."""
    per_warp = -(-registers * 32 // REGISTER_UNIT) * REGISTER_UNIT
    return min(MAX_THREADS, REGISTERS_PER_SM // per_warp * 32)


def launch_problems(kernel: FusedKernel, resources: dict) -> list[str]:
    """Why ``kernel`` cannot launch at its block size (empty: it can)."""
    problems = []
    if kernel.block > max_block(resources["registers"]):
        problems.append(
            f"{resources['registers']} registers × {kernel.block} threads > {REGISTERS_PER_SM} "
            f"(largest block {max_block(resources['registers'])})"
        )
    if resources["shared_bytes"] > STATIC_SHARED_LIMIT:
        problems.append(f"{resources['shared_bytes']} bytes of static shared memory > {STATIC_SHARED_LIMIT}")
    if resources["shared_bytes"] + kernel.dynamic_shared > STATIC_SHARED_LIMIT:
        problems.append(
            f"{resources['shared_bytes']} + {kernel.dynamic_shared} bytes of shared memory need the "
            "opt-in (cudaFuncAttributeMaxDynamicSharedMemorySize) above 48 KiB"
        )
    return problems


# ---------------------------------------------------------------- the model


def product_work(sizes: tuple, block: int) -> tuple[int, int]:
    """(multiply-adds of the busiest thread, threads with work) for a product of literal sizes
    (rows, cols, inner) in a block of ``block`` threads, as ``gemm_tiles`` lays it out: whole
    tiles of (block / 16 × 4) × 64 outputs, 16 per thread, the inner extent rounded up to eights;
    one thread per output below ``GEMM_NARROW`` rows or columns (a tree without it tiles all)."""
    from dispatchrl.kernels.core import cuda as products

    rows, cols, inner = sizes[:3]
    if min(rows, cols) < getattr(products, "GEMM_NARROW", 0):
        return -(-rows * cols // block) * inner, min(block, rows * cols)
    tile_rows = block // products.GEMM_THREAD_COLS * 4
    tiles = -(-rows // tile_rows) * -(-cols // products.GEMM_COLS)
    return tiles * 16 * -(-inner // 8) * 8, block


def call_cycles(kernel: FusedKernel, sass_per_mac: float | None, lds_bytes_per_mac: float = 0.0) -> list:
    """``(call, (issue, shared, barriers))`` in cycles per run, for each call of ``kernel`` that
    runs (weight > 0): the terms :func:`predict` sums (see there)."""
    spm = 31.0 if sass_per_mac is None else float(sass_per_mac)
    out = []
    for c in kernel.calls:
        if c.weight == 0:
            continue
        threads = max(1, min(kernel.block, c.busy_threads or c.parallel))
        warps = -(-threads // 32)
        if c.macs:
            per_warp = (c.thread_macs or math.ceil(c.macs / threads)) * spm
        else:
            per_warp = (c.lines or 0) * SASS_PER_LINE
        issue = per_warp * max(-(-warps // ISSUE_PER_CLOCK), LATENCY_CPI)
        shared = c.macs * lds_bytes_per_mac / SHARED_BYTES_PER_CLOCK
        out.append((c, (issue, shared, PHASE_CYCLES + (c.barriers or 0) * INNER_BARRIER_CYCLES)))
    return out


def call_rows(kernel: FusedKernel, sass_per_mac: float | None, lds_bytes_per_mac: float = 0.0) -> list[dict]:
    """The model's time per step by block form and literal sizes (the sizes of dense forms only),
    largest first: where a fused step's predicted time goes (``--calls``)."""
    groups: dict[tuple, dict] = {}
    for c, (issue, shared, barriers) in call_cycles(kernel, sass_per_mac, lds_bytes_per_mac):
        key = (c.form, c.sizes if c.macs else None)
        row = groups.setdefault(
            key,
            {
                "form": c.form,
                "sizes": list(c.sizes) if c.macs else None,
                "calls": 0,
                "runs_per_step": 0.0,
                "us": 0.0,
                "issue_us": 0.0,
                "barrier_us": 0.0,
                "threads": 0,
            },
        )
        row["calls"] += 1
        row["runs_per_step"] += c.weight
        row["us"] += c.weight * (max(issue, shared) + barriers) / (CLOCK_GHZ * 1000)
        row["issue_us"] += c.weight * issue / (CLOCK_GHZ * 1000)
        row["barrier_us"] += c.weight * barriers / (CLOCK_GHZ * 1000)
        row["threads"] = max(row["threads"], min(kernel.block, c.busy_threads or c.parallel))
    out = sorted(groups.values(), key=lambda r: -r["us"])
    for row in out:
        for k in ("runs_per_step", "us", "issue_us", "barrier_us"):
            row[k] = round(row[k], 3 if k == "runs_per_step" else 2)
    return out


def predict(kernel: FusedKernel, sass_per_mac: float | None, lds_bytes_per_mac: float = 0.0) -> dict:
    """Predicted µs per step of ``kernel`` on one H100 SM (the fused step runs in one block).

    Per call ``c`` of the step (run ``w_c`` times per step, by branch replay), with ``B`` threads
    in the block and ``A_c = ceil(min(B, parallel_c) / 32)`` warps with work:

    - ``I_c``, the SASS instructions of the busiest warp: for a dense form the multiply-adds its
      busiest thread executes (:func:`product_work`: whole tiles, padding included, or one
      output's inner extent) × ``sass_per_mac``; for any other call ``lines_c × SASS_PER_LINE``
      (the Python lines thread 0 ran).
    - issue and latency: ``I_c × max(ceil(A_c / 4), LATENCY_CPI)`` cycles: each of the 4
      schedulers issues one warp-instruction per clock to its ``ceil(A_c/4)`` warps, and a warp
      alone issues only every ``LATENCY_CPI`` cycles (the latency floor of a block of few warps;
      at 256 threads, 2 warps per scheduler, it is what binds; from 1024 threads issue binds).
    - shared memory: ``macs_c × lds_bytes_per_mac × 32 / 32 / SHARED_BYTES_PER_CLOCK`` (bytes the
      dense loops load per multiply-add per thread, at 128 bytes per clock per SM).
    - barriers: ``PHASE_CYCLES`` for the barrier after the call, ``INNER_BARRIER_CYCLES`` per
      barrier inside it (thread 0's count).

    ``cycles = Σ_c w_c × (max(issue_c, shared_c) + PHASE_CYCLES + inner_c × INNER_BARRIER_CYCLES)
    + branches_per_step × PHASE_CYCLES``; µs = cycles / CLOCK_GHZ / 1000 + LAUNCH_US /
    steps_per_launch. Without SASS (no nvdisasm) dense calls count 31 instructions per multiply-
    add, the naive kernels' figure; with SASS but no dense loop (every product unrolled), the whole
    kernel's instructions per multiply-add. The constants and their sources are at the top of this file;
    ``LATENCY_CPI`` is the one fitted to a measurement (docs/DESIGN.md compares)."""
    cycles = issue_total = shared_total = barrier_total = other_total = 0.0
    for c, (issue, shared, barriers) in call_cycles(kernel, sass_per_mac, lds_bytes_per_mac):
        cycles += c.weight * (max(issue, shared) + barriers)
        issue_total += c.weight * issue
        other_total += 0.0 if c.macs else c.weight * issue
        shared_total += c.weight * shared
        barrier_total += c.weight * barriers
    cycles += kernel.branches_per_step * PHASE_CYCLES
    barrier_total += kernel.branches_per_step * PHASE_CYCLES
    per_cycle_us = 1 / (CLOCK_GHZ * 1000)
    launch = LAUNCH_US / max(kernel.steps_per_launch, 1)
    return {
        "predicted_us": round(cycles * per_cycle_us + launch, 2),
        "issue_us": round(issue_total * per_cycle_us, 2),
        "non_dense_issue_us": round(other_total * per_cycle_us, 2),
        "shared_us": round(shared_total * per_cycle_us, 2),
        "barrier_us": round(barrier_total * per_cycle_us, 2),
        "launch_us": round(launch, 3),
    }


# ---------------------------------------------------------------- the report


def rows(kernels: list[FusedKernel], compiled: dict, ccs: tuple[int, ...]) -> list[dict]:
    out = []
    for index, kernel in enumerate(kernels):
        for cc in ccs:
            r = compiled[(index, cc)]
            problems = launch_problems(kernel, r)
            barriers = kernel.barriers_per_step()
            row = {
                "program": kernel.program,
                "cc": cc,
                "registers": r["registers"],
                "spill_stores": r["spill_stores"],
                "spill_loads": r["spill_loads"],
                "stack_bytes": r["stack_bytes"],
                "shared_bytes": r["shared_bytes"] + kernel.dynamic_shared,
                "block": kernel.block,
                "sass_per_mac": r.get("sass_per_mac"),
                "lds": r.get("lds"),
                "barriers_per_step": None if barriers is None else round(barriers, 2),
                **predict(
                    kernel, r.get("sass_per_mac") or r.get("kernel_sass_per_mac"), r.get("lds_bytes_per_mac") or 0.0
                ),
                "macs_per_step": round(kernel.macs_per_step()),
                "max_block": max_block(r["registers"]),
                "launchable": not problems,
                "problems": problems,
                "arrays": len(kernel.params),
                "steps_per_launch": kernel.steps_per_launch,
            }
            out.append(row)
    return out


def table(report: list[dict]) -> str:
    head = f"{'program':12} {'cc':>3} {'regs':>4} {'spill':>7} {'stack':>5} {'smem':>6} {'block':>5} {'max':>5} "
    head += f"{'sass/MAC':>8} {'LDS':>4} {'bar/step':>8} {'MAC/step':>9} {'µs/step':>8}"
    lines = [head]
    for r in report:
        spm = "-" if r["sass_per_mac"] is None else f"{r['sass_per_mac']:.1f}"
        lds = "-" if r["lds"] is None else str(r["lds"])
        bars = "?" if r["barriers_per_step"] is None else f"{r['barriers_per_step']:.1f}"
        lines.append(
            f"{r['program']:12} {r['cc']:>3} {r['registers']:>4} {r['spill_stores']:>3}/{r['spill_loads']:<3} "
            f"{r['stack_bytes']:>5} {r['shared_bytes']:>6} {r['block']:>5} {r['max_block']:>5} {spm:>8} {lds:>4} "
            f"{bars:>8} {r['macs_per_step']:>9} {r['predicted_us']:>8.1f}"
            + ("" if r["launchable"] else "  CANNOT LAUNCH")
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="one JSON line per kernel and compute capability")
    parser.add_argument(
        "--programs",
        default=",".join(PROGRAMS),
        help="comma-separated: td3, sac, ppo, demo (and layer64, or algo:env such as ppo:cartpole, dqn:cartpole, "
        "with config fields as +field=JSON: dqn:cartpole+dueling=true)",
    )
    parser.add_argument("--cc", default="90,80", help="compute capabilities, e.g. 90,80")
    parser.add_argument(
        "--calls", action="store_true", help="also a JSON line per block form: where the model's time goes"
    )
    parser.add_argument("--python", default=os.environ.get("DISPATCHRL_CUDA_PYTHON", sys.executable))
    parser.add_argument("--out", default=None, help="keep PTX, cubins and SASS here (default: a temporary folder)")
    parser.add_argument("--replay-steps", type=int, default=10_000, help="steps of branch replay per program")
    parser.add_argument("--compile-worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.compile_worker:
        compile_worker(args.compile_worker)
        return
    why = real_compiler(args.python)
    if why:
        raise SystemExit(f"cuda_static: {why}; pass --python with one that has dispatchrl[cuda]")
    ccs = tuple(int(c) for c in args.cc.split(","))
    kernels = []
    for program in args.programs.split(","):
        kernels += build(program.strip(), args.replay_steps)

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    with contextlib.ExitStack() as stack:
        out = Path(args.out) if args.out else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        out.mkdir(parents=True, exist_ok=True)
        compiled = compile_kernels(kernels, ccs, args.python, out, log)
    report = rows(kernels, compiled, ccs)
    if args.json:
        for row in report:
            print(json.dumps(row), flush=True)
    else:
        print(table(report))
    if args.calls:
        for index, kernel in enumerate(kernels):
            for cc in ccs:
                r = compiled[(index, cc)]
                spm = r.get("sass_per_mac") or r.get("kernel_sass_per_mac")
                for row in call_rows(kernel, spm, r.get("lds_bytes_per_mac") or 0.0):
                    print(json.dumps({"program": kernel.program, "cc": cc, **row}), flush=True)


if __name__ == "__main__":
    if "--compile-worker" not in sys.argv:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"  # building runs in the simulator, before numba is imported
    sys.path.insert(0, str(ROOT))
    main()
