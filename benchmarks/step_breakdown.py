"""Where a fused TD3 (or SAC) Pendulum step's time goes, per kernel call and per category.

Builds the state and the fused env step exactly as the training driver does (``build_state``,
the divergence check, ``driver._NativeLoop``), then:

1. times the real fused run: ``--steps`` env steps (default 10k) in the driver's chunks, ``--runs``
   times from the same initial state (restored in place, so every run computes the same numbers);
2. counts how often each recorded kernel call executes over such a run by replaying the step's
   branch conditions (``Below``/``Every`` on counters that only ``increment`` changes) and checks
   the replayed counters against the real run's final ones;
3. times every kernel call of the step alone with its real arguments, from the state the run
   ended in: each call becomes a one-call program built by the CPU backend's own
   ``njit_program`` (the same generated loop, runtime scalars and denormal flushing as the fused
   step), called ``n`` times per timing; the arrays the call touches are restored before each
   timing, so repeating a kernel (Adam, Polyak, the replay ring, the counters) cannot drift the
   state it is timed on;
4. for every dense layer kernel, times its BLAS products alone (``np.dot`` on the same arrays):
   the GEMM floor, the rest of the kernel being bias, activation, their gradients and Wᵀ copies.

Prints JSON lines: "machine", one "call" per kernel call (min/median µs per call, executions per
run, µs per env step), one "category" per category, "total" (sum of the parts against the fused
step, both in µs per env step, and their ratio). Minimums are the figures to compare (the
machine may be shared); medians are given beside them. A table goes to stderr.

    python benchmarks/step_breakdown.py [--algo td3|sac] [--steps 10000] [--runs 3] [--repeats 200]
                                         [--fused-only]  (only the fused timings: A/B of two checkouts)
"""

import argparse
import hashlib
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any
from unittest import mock

import numba
import numpy as np
from numba import njit

import dispatchrl as drl
from dispatchrl.algorithms import sac, td3
from dispatchrl.algorithms.protocol import Schedule
from dispatchrl.arrays import Array
from dispatchrl.backends.cpu import JIT_FAST, njit_program
from dispatchrl.kernels.core.cpu import _input_gradient_tiled, increment_kernel, matmul_blas, matmul_loop
from dispatchrl.kernels.core.cpu_gemm import matmul_tiled
from dispatchrl.staging import Branch, kernel_calls, trace
from dispatchrl.training import driver
from dispatchrl.training.envspec import resolve_env
from dispatchrl.training.runs import build_state

__all__ = [
    "CATEGORIES",
    "GEMM_ONLY",
    "build",
    "category",
    "execution_counts",
    "gemm_only_kernel",
    "numbered_calls",
    "traced_step",
]

ALGOS = {"td3": td3, "sac": sac}
LEARNER_THREADS = "DISPATCHRL_LEARNER_THREADS"

#: category of each kernel (by function name); anything else is "other"
CATEGORIES: dict[str, str] = {
    **{
        name: "dense"
        for name in (
            "dense_forward_blas",
            "dense_forward_inplace_blas",
            "dense_forward_loop",
            "dense_forward_inplace_loop",
            "dense_backward_blas",
            "dense_backward_input_blas",
            "dense_backward_loop",
            "dense_backward_input_loop",
            "dense_input_gradient_blas",
            "dense_input_gradient_loop",
            "matmul_blas",
            "matmul_loop",
            "dense_forward_tiled",
            "dense_forward_inplace_tiled",
            "dense_backward_tiled",
            "dense_backward_input_tiled",
            "dense_input_gradient_tiled",
            "dense_backward_masked_tiled",
            "dense_input_gradient_masked_tiled",
            "matmul_tiled_kernel",
        )
    },
    **{
        name: "elementwise"
        for name in (
            "activation_kernel",
            "copy_kernel",
            "fill_kernel",
            "concat_columns_kernel",
            "slice_columns_kernel",
            "select_min_rows_kernel",
        )
    },
    "adam_step_kernel": "adam_polyak",
    "adam_step_lr_array_kernel": "adam_polyak",
    "polyak_update_kernel": "adam_polyak",
    **{
        name: "loss_target"
        for name in (
            "mse_gradient_kernel",
            "mse_loss_kernel",
            "td_target_kernel",
            "soft_td_target_kernel",
            "entropy_temperature_gradient_kernel",
            "gaussian_tanh_backward_kernel",
        )
    },
    "pendulum_step_kernel": "env",
    "pendulum_reset_kernel": "env",
    "replay_add_kernel": "replay",
    "uniform_index_kernel": "replay",  # replay_sample on the CPU: draw the rows, then gather them
    "replay_gather_kernel": "replay",
    "random_uniform_kernel": "noise_rng",
    "add_clipped_noise_kernel": "noise_rng",
    "gaussian_tanh_sample_kernel": "noise_rng",
    # bookkeeping: logging sums, episode log, step counter, divergence check
    "accumulate_critic_stats_kernel": "other",
    "accumulate_actor_stats_kernel": "other",
    "accumulate_sac_actor_stats_kernel": "other",
    "track_episodes_kernel": "other",
    "increment_kernel": "other",
    "nonfinite_flag_kernel": "other",
}
ORDER = ("dense", "elementwise", "adam_polyak", "loss_target", "env", "replay", "noise_rng", "other")


def category(kernel: Any) -> str:
    """The category of a recorded kernel (a Numba dispatcher or any callable)."""
    return CATEGORIES.get(getattr(kernel, "__name__", ""), "other")


# ------------------------------------------------------------ the BLAS products of dense kernels

_JIT = dict(JIT_FAST, cache=False)  # pins the runtime like every kernel; __main__ is not cacheable


@njit(**_JIT)
def _transposed_product(d_pre, W, WT, d_x):
    if WT.shape != W.shape[::-1]:  # as _input_gradient_blas: narrow inputs multiply by W.T directly
        np.dot(d_pre, W.T, d_x)
    else:
        np.dot(d_pre, WT, d_x)


def _products_only(product: Callable[..., None], input_gradient: Callable[..., None]) -> dict[str, Any]:
    """Per dense kernel kind, a kernel taking its arguments that runs only its products, with
    ``product(a, b, out)`` (a·b) and ``input_gradient(d_pre, W, WT, d_x)`` (d_pre·Wᵀ)."""

    @njit(**_JIT)
    def forward(x, W, b, pre, out, code):
        product(x, W, pre)

    @njit(**_JIT)
    def forward_inplace(x, W, b, out, code):
        product(x, W, out)

    @njit(**_JIT)
    def backward(x, W, pre, out, d_out, d_pre, dW, db, code):
        product(x.T, d_pre, dW)

    @njit(**_JIT)
    def backward_input(x, W, WT, pre, out, d_out, d_pre, dW, db, d_x, code):
        product(x.T, d_pre, dW)
        input_gradient(d_pre, W, WT, d_x)

    @njit(**_JIT)
    def input_gradient_only(W, WT, pre, out, d_out, d_pre, d_x, code):
        input_gradient(d_pre, W, WT, d_x)

    @njit(**_JIT)
    def input_gradient_masked(W, WT, pre, out, d_out, d_pre, d_x, mask, code):
        input_gradient(d_pre, W, WT, d_x)

    return {
        "forward": forward,
        "forward_inplace": forward_inplace,
        "backward": backward,
        "backward_input": backward_input,
        "input_gradient": input_gradient_only,
        "backward_masked": backward_input,  # the same products, the mask in the stores
        "input_gradient_masked": input_gradient_masked,
    }


_TILED = _products_only(matmul_tiled, _input_gradient_tiled)
_BLAS = _products_only(matmul_blas, _transposed_product)
_LOOP = _products_only(matmul_loop, _transposed_product)  # no input-gradient twins: those loop kernels take no WT

#: dense kernel name -> a kernel taking the same arguments that runs only its matrix products
#: (the tiled kernels' input gradients include their Wᵀ copy, as the BLAS ones where they copy)
GEMM_ONLY = {
    **{f"dense_{kind}_tiled": twin for kind, twin in _TILED.items()},
    **{f"dense_{kind}_blas": _BLAS[kind] for kind in ("forward", "forward_inplace", "backward", "backward_input")},
    "dense_input_gradient_blas": _BLAS["input_gradient"],
    **{f"dense_{kind}_loop": _LOOP[kind] for kind in ("forward", "forward_inplace", "backward")},
}


def gemm_only_kernel(kernel: Any) -> Any:
    """The products-only twin of a dense kernel, or None."""
    return GEMM_ONLY.get(getattr(kernel, "__name__", ""))


def gemm_flops(kernel: Any, args: tuple) -> int:
    """Floating-point operations (2mkn per product) of a dense kernel's products."""
    name = kernel.__name__
    a = [x.shape if isinstance(x, Array) else None for x in args]
    if name.startswith("dense_forward"):
        (m, k), n = a[0], a[1][1]
        return 2 * m * k * n
    if name in ("dense_backward_blas", "dense_backward_tiled"):  # x.T d_pre
        (m, k), n = a[0], a[1][1]
        return 2 * m * k * n
    if name in ("dense_backward_input_blas", "dense_backward_input_tiled", "dense_backward_masked_tiled"):
        (m, k), n = a[0], a[1][1]
        return 4 * m * k * n
    if name in ("dense_input_gradient_blas", "dense_input_gradient_tiled", "dense_input_gradient_masked_tiled"):
        # W (k, n), d_pre (m, n)
        (k, n), m = a[0], a[2][0]
        return 2 * m * k * n
    return 0


# ------------------------------------------------------------ how often each call executes


def numbered_calls(nodes: list) -> dict[int, int]:
    """id(recorded call) -> its index in :func:`staging.kernel_calls` order."""
    return {id(node): i for i, node in enumerate(kernel_calls(nodes))}


def execution_counts(nodes: list, steps: int) -> tuple[list[int], dict[int, int]]:
    """How often each recorded kernel call (in kernel_calls order) runs over ``steps`` calls of the
    step, replaying its branch conditions from the counters' current values; returns the counts
    and the counters' final values (id of the counter's data -> value). Counters change only by
    ``increment_kernel`` calls (as in TD3/SAC/PPO); anything else writing one would be missed,
    which the caller checks against a real run."""
    index = numbered_calls(nodes)
    counts = [0] * len(index)
    counters: dict[int, int] = {}

    def counters_of(items: list) -> None:
        for node in items:
            if isinstance(node, Branch):
                data = node.condition.counter.data
                counters.setdefault(id(data), int(data[0]))
                counters_of(node.then)
                counters_of(node.otherwise)
            elif node[0] is increment_kernel:
                counters.setdefault(id(node[1][0].data), int(node[1][0].data[0]))

    def walk(items: list) -> None:
        for node in items:
            if isinstance(node, Branch):
                value = counters[id(node.condition.counter.data)]
                walk(node.then if node.condition.holds(value) else node.otherwise)
            else:
                counts[index[id(node)]] += 1
                kernel, args = node
                if kernel is increment_kernel:
                    counters[id(args[0].data)] += int(args[1])

    counters_of(nodes)
    for _ in range(steps):
        walk(nodes)
    return counts, counters


# ------------------------------------------------------------ timing


def arrays_of(nodes: list) -> list[np.ndarray]:
    """Every distinct host array the recorded calls (and branch counters) read or write."""
    seen: dict[int, np.ndarray] = {}

    def visit(items: list) -> None:
        for node in items:
            if isinstance(node, Branch):
                seen.setdefault(id(node.condition.counter.data), node.condition.counter.data)
                visit(node.then)
                visit(node.otherwise)
            else:
                for a in node[1]:
                    if isinstance(a, Array):
                        seen.setdefault(id(a.data), a.data)

    visit(nodes)
    return list(seen.values())


class Snapshot:
    """Copies of some arrays, written back in place by :meth:`restore`."""

    def __init__(self, arrays: list[np.ndarray]) -> None:
        self.pairs = [(a, a.copy()) for a in arrays]

    def restore(self) -> None:
        for live, saved in self.pairs:
            np.copyto(live, saved)

    def digest(self) -> str:
        h = hashlib.sha256()
        for live, _ in self.pairs:
            h.update(np.ascontiguousarray(live).tobytes())
        return h.hexdigest()[:16]


def time_program(run: Callable[[int], None], restore: Callable[[], None], repeats: int, target: float) -> list[float]:
    """Seconds per iteration of ``run(n)`` over ``repeats`` timings of about ``target`` seconds
    each, ``restore()`` called (untimed) before each."""
    restore()
    run(1)
    n = 1
    while True:  # calibrate n
        restore()
        start = time.perf_counter()
        run(n)
        elapsed = time.perf_counter() - start
        if elapsed >= target / 4 or n >= 1 << 20:
            break
        n *= 4
    n = max(1, min(1 << 22, int(n * target / max(elapsed, 1e-9))))
    times = []
    for _ in range(repeats):
        restore()
        start = time.perf_counter()
        run(n)
        times.append((time.perf_counter() - start) / n)
    return times


def time_windows(step: Any, state: Snapshot, window: int, repeats: int) -> list[float]:
    """Seconds per env step of ``step(window)``, each of ``repeats`` timings from ``state``."""
    times = []
    for _ in range(repeats):
        state.restore()
        start = time.perf_counter()
        step(window)
        times.append((time.perf_counter() - start) / window)
    state.restore()
    return times


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {"platform": platform.platform(), "python": platform.python_version()}
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
        fields: dict[str, str] = {}
        for line in text.splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
        flags = fields.get("flags", "").split()
        info.update(
            cpu=fields.get("model name"),
            cpu_family=fields.get("cpu family"),
            cpu_model=fields.get("model"),
            mhz=fields.get("cpu MHz"),
            avx2="avx2" in flags,
            avx512f="avx512f" in flags,
            fma="fma" in flags,
        )
    except OSError:
        info["cpu"] = platform.processor()
    info["logical_cpus"] = os.cpu_count()
    import llvmlite.binding as llvm

    info["llvm_cpu"] = os.environ.get("NUMBA_CPU_NAME") or llvm.get_host_cpu_name()
    info.update(numba=numba.__version__, numpy=np.__version__)
    from dispatchrl.kernels.core.cpu import tiled_gemm

    info["gemm"] = "tiled" if tiled_gemm() else "blas"  # float32 products above the BLAS threshold
    try:
        from threadpoolctl import threadpool_info

        info["blas"] = [
            {k: pool.get(k) for k in ("internal_api", "version", "architecture", "num_threads", "filepath")}
            for pool in threadpool_info()
            if pool.get("user_api") == "blas"
        ]
    except ImportError:
        pass
    return info


def emit(record: dict[str, Any]) -> None:
    print(json.dumps(record), flush=True)


def log(*parts: Any) -> None:
    print("[step_breakdown]", *parts, file=sys.stderr, flush=True)


def describe(args: tuple) -> list[Any]:
    return [list(a.shape) if isinstance(a, Array) else a for a in args]


# ------------------------------------------------------------ the run


def build(algo_name: str, seed: int = 0, config: Any = None, env: str = "pendulum") -> tuple[Any, Any]:
    """(run, divergence check) as driver.train builds them for ``env`` on CPU (its default config)."""
    algo = ALGOS[algo_name]
    device = drl.CPU()
    config = algo.config_for(env) if config is None else config
    spec = resolve_env(env, config.num_envs)
    state = build_state(algo, device, spec, config, seed)
    schedule: Schedule = algo.schedule(config)
    if schedule.updates:
        raise SystemExit("step_breakdown: only algorithms whose update is fused into the env step (TD3, SAC)")
    iterations = config.total_steps // (config.num_envs * schedule.env_steps)
    run = driver.TrainingRun(algo, device, spec, config, seed, state, schedule, iterations, done=0)
    divergence = None
    if config.check_every:
        divergence = driver.DivergenceCheck(
            drl.zeros(device, 1, np.int64), driver.watched_quantities(algo, state), config.check_every
        )
    return run, divergence


def traced_step(run: Any, divergence: Any) -> list:
    """The recorded nodes of the driver's fused env step, traced without compiling it, on one
    learner thread: the kernels are timed one by one, so forks are recorded as their sequence."""
    env_step, _ = driver._with_checks(run, divergence)
    nodes: list = []
    with mock.patch.dict(os.environ, {LEARNER_THREADS: "1"}), trace(nodes):
        env_step(run.device, run.config, run.spec.native, run.state)
    return nodes


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--algo", choices=sorted(ALGOS), default="td3")
    parser.add_argument("--steps", type=int, default=10_000, help="env steps of the timed run (and of the counts)")
    parser.add_argument("--runs", type=int, default=3, help="timed fused runs")
    parser.add_argument("--repeats", type=int, default=200, help="timings per kernel call")
    parser.add_argument("--target-ms", type=float, default=0.25, help="length of one kernel timing")
    parser.add_argument("--window", type=int, default=8, help="env steps per short fused timing")
    parser.add_argument("--windows", type=int, default=200, help="short fused timings from the end state")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--env", default="pendulum", help="a native env: pendulum, multirotor, ...")
    parser.add_argument("--fused-only", action="store_true", help="only the fused run and windows (A/B of builds)")
    args = parser.parse_args(argv)
    # the parts are timed on one thread, so the fused step they are held against runs on one too
    os.environ[LEARNER_THREADS] = "1"

    load_before = os.getloadavg()
    emit(
        {
            "record": "machine",
            "algo": args.algo,
            "env": args.env,
            "loadavg": [round(x, 2) for x in load_before],
            **machine(),
        }
    )
    start = time.perf_counter()
    run, divergence = build(args.algo, args.seed, env=args.env)
    loop = driver._NativeLoop(run, divergence)  # the driver's own fused step
    step = loop.env_step
    nodes = step.calls
    calls = step.kernel_calls
    log(f"{args.algo}: {len(calls)} kernel calls, built and compiled in {time.perf_counter() - start:.1f} s")
    initial = Snapshot(arrays_of(nodes))
    counts, final_counters = execution_counts(nodes, args.steps)

    # the fused run, in the driver's chunks
    chunk = driver.chunk_iterations(run.spec, run.schedule, args.steps // run.schedule.env_steps)
    seconds, chunk_seconds, digests = [], [], set()
    for _ in range(args.runs):
        initial.restore()
        done, times = 0, []
        begin = time.perf_counter()
        while done < args.steps:
            count = min(chunk, args.steps - done)
            t0 = time.perf_counter()
            loop.run(count)
            times.append((time.perf_counter() - t0) / count)
            done += count
        seconds.append(time.perf_counter() - begin)
        chunk_seconds.append(statistics.median(times[1:] or times))
        digests.add(Snapshot(arrays_of(nodes)).digest())
    if len(digests) != 1:
        raise SystemExit(f"step_breakdown: runs from the same state ended in different states {digests}")
    for data_id, value in final_counters.items():  # the replayed branch counts follow the real run
        live = next(a for a in arrays_of(nodes) if id(a) == data_id)
        if int(live[0]) != value:
            raise SystemExit(f"step_breakdown: replayed counter {value} != real {int(live[0])}")
    fused = min(seconds) / args.steps
    log(f"fused run: {[round(s, 3) for s in seconds]} s for {args.steps} steps")

    # the fused step in short windows from the state the run ended in (all of it restored before
    # each): short timings dodge the other processes of a shared machine, as the kernels' do
    end_state = Snapshot(arrays_of(nodes))
    window_counts, _ = execution_counts(nodes, args.window)
    window_times = time_windows(step, end_state, args.window, args.windows)
    fused_window = min(window_times)
    if args.fused_only:
        emit(
            {
                "record": "fused",
                "algo": args.algo,
                "fused_runs_seconds": [round(x, 4) for x in seconds],
                "window_steps": args.window,
                "window_fused_min_us_per_env_step": round(fused_window * 1e6, 2),
                "window_fused_median_us_per_env_step": round(statistics.median(window_times) * 1e6, 2),
                "loadavg_after": [round(x, 2) for x in os.getloadavg()],
            }
        )
        return

    # every call alone, from the state the run ended in
    target = args.target_ms / 1e3
    programs: dict[tuple, Any] = {}
    rows = []
    for i, (kernel, call_args) in enumerate(calls):
        touched = Snapshot([a.data for a in call_args if isinstance(a, Array)])

        def restore(touched: Snapshot = touched) -> None:
            touched.restore()

        times = time_program(njit_program([(kernel, call_args)]), restore, args.repeats, target)
        twin = gemm_only_kernel(kernel)
        gemm_times = None
        if twin is not None:
            key = (twin, *[id(a) if isinstance(a, Array) else a for a in call_args])
            if key not in programs:
                programs[key] = njit_program([(twin, call_args)])
            gemm_times = time_program(programs[key], restore, args.repeats, target)
        end_state.restore()
        row = {
            "record": "call",
            "algo": args.algo,
            "index": i,
            "kernel": kernel.__name__,
            "category": category(kernel),
            "args": describe(call_args),
            "executions": counts[i],
            "window_executions": window_counts[i],
            "min_us": round(min(times) * 1e6, 3),
            "median_us": round(statistics.median(times) * 1e6, 3),
            "us_per_env_step": round(min(times) * 1e6 * counts[i] / args.steps, 3),
        }
        if gemm_times is not None:
            flops = gemm_flops(kernel, call_args)
            row.update(
                gemm_min_us=round(min(gemm_times) * 1e6, 3),
                gemm_median_us=round(statistics.median(gemm_times) * 1e6, 3),
                gemm_us_per_env_step=round(min(gemm_times) * 1e6 * counts[i] / args.steps, 3),
                gemm_flops=flops,
                gemm_gflops=round(flops / min(gemm_times) / 1e9, 2),
            )
        rows.append(row)
        emit(row)

    per_step = {c: 0.0 for c in ORDER}
    per_step_median = {c: 0.0 for c in ORDER}
    calls_per_step = {c: 0.0 for c in ORDER}
    for row in rows:
        per_step[row["category"]] += row["min_us"] * row["executions"] / args.steps
        per_step_median[row["category"]] += row["median_us"] * row["executions"] / args.steps
        calls_per_step[row["category"]] += row["executions"] / args.steps
    gemm = sum(r.get("gemm_min_us", 0.0) * r["executions"] for r in rows) / args.steps
    flops = sum(r.get("gemm_flops", 0) * r["executions"] for r in rows) / args.steps
    for c in ORDER:
        record = {
            "record": "category",
            "algo": args.algo,
            "category": c,
            "us_per_env_step": round(per_step[c], 2),
            "median_us_per_env_step": round(per_step_median[c], 2),
            "calls_per_env_step": round(calls_per_step[c], 3),
        }
        if c == "dense":
            record.update(
                gemm_only_us_per_env_step=round(gemm, 2), non_gemm_us_per_env_step=round(per_step[c] - gemm, 2)
            )
        emit(record)
    total = sum(per_step.values())
    window_sum = sum(r["min_us"] * r["window_executions"] for r in rows) / args.window
    learning = counts[next(i for i, (k, _) in enumerate(calls) if k.__name__ == "uniform_index_kernel")]
    emit(
        {
            "record": "total",
            "algo": args.algo,
            "steps": args.steps,
            "learning_steps": learning,
            "sum_of_parts_us_per_env_step": round(total, 2),
            "sum_of_parts_median_us_per_env_step": round(sum(per_step_median.values()), 2),
            "gemm_only_us_per_env_step": round(gemm, 2),
            "gemm_mflop_per_env_step": round(flops / 1e6, 3),
            "gemm_gflops": round(flops / gemm / 1e3, 2),
            "fused_us_per_env_step": round(fused * 1e6, 2),
            "fused_runs_seconds": [round(s, 4) for s in seconds],
            "fused_steady_us_per_env_step": round(min(chunk_seconds) * 1e6, 2),
            "fused_over_sum": round(fused * 1e6 / total, 3),
            # steady state (every step learns): short fused windows against their own parts
            "window_steps": args.window,
            "window_sum_of_parts_us_per_env_step": round(window_sum, 2),
            "window_fused_min_us_per_env_step": round(fused_window * 1e6, 2),
            "window_fused_median_us_per_env_step": round(statistics.median(window_times) * 1e6, 2),
            "window_fused_over_sum": round(fused_window * 1e6 / window_sum, 3),
            "loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        }
    )
    log(f"{'category':<14}{'us/step':>9}{'median':>9}{'calls/step':>11}")
    for c in ORDER:
        log(f"{c:<14}{per_step[c]:9.2f}{per_step_median[c]:9.2f}{calls_per_step[c]:11.2f}")
    log(f"{'  of dense: GEMM only':<23}{gemm:9.2f}")
    log(f"{'sum of parts':<14}{total:9.2f}   fused {fused * 1e6:.2f} us/step (ratio {fused * 1e6 / total:.3f})")
    log(
        f"steady windows of {args.window} steps: parts {window_sum:.2f}, fused min {fused_window * 1e6:.2f} us/step "
        f"(ratio {fused_window * 1e6 / window_sum:.3f})"
    )


if __name__ == "__main__":
    main()
