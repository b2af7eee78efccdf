"""Where a fused CUDA step's time goes, call by call, measured on the GPU itself.

Sets ``dispatchrl.backends.cuda.PROFILE``, so that every fused kernel compiled afterwards times its
calls with the SM's cycle counter (thread 0 reads ``%clock64`` after each call's barrier and adds
the cycles since the previous one), then runs the programs asked for:
- ``demo``: the ``dispatchrl demo`` step (MLP 4-64-64-1, batch 100, MSE + Adam), timed on the
  wall clock as well, which gives the SM clock rate that converts cycles to microseconds;
- ``td3``, ``sac``, ``ppo``: ``dispatchrl train ALGO --env pendulum --device cuda --steps N``.
One JSON line per call (its kernel and literal sizes) and program: ``{"bench": "cuda_profile",
"program", "call", "positions", "executions_per_iteration", "cycles_per_execution",
"cycles_per_iteration", "share"}``, largest first, then one ``"call": "total"`` line per kernel
with the cycles of one loop iteration (an env step for off-policy training, warm-up included; a
PPO rollout step or minibatch step) and, at the measured clock, microseconds.
What is not between two barriers (the loop's own instructions, the launch) is not counted.
Timings mean nothing under NUMBA_ENABLE_CUDASIM=1 (its clock is the host's nanoseconds).

    python benchmarks/cuda_profile.py [--programs demo,td3] [--steps 3000] [--top 25]
"""

import argparse
import json
import os
import time
from collections import defaultdict

import numpy as np

import dispatchrl as drl
from dispatchrl import nn


def emit(record) -> None:
    print(json.dumps(record), flush=True)


def summarise(program: str, run, clock_mhz: float | None, top: int) -> None:
    """The JSON lines of one profiled kernel: per call (label), then its total."""
    cycles, counts = run.read_profile()
    iterations = int(counts.max()) if len(counts) else 0
    if iterations == 0:
        emit({"bench": "cuda_profile", "program": program, "failed": "the kernel ran no iteration"})
        return
    per_label: dict = defaultdict(lambda: [0, 0, 0])
    for label, c, n in zip(run.profile_labels, cycles, counts):
        entry = per_label[label]
        entry[0] += int(c)
        entry[1] += int(n)
        entry[2] += 1
    total = int(cycles.sum())
    rows = sorted(per_label.items(), key=lambda item: -item[1][0])
    for label, (c, n, positions) in rows[:top]:
        emit(
            {
                "bench": "cuda_profile",
                "program": program,
                "call": label,
                "positions": positions,
                "executions_per_iteration": round(n / iterations, 4),
                "cycles_per_execution": round(c / max(n, 1), 1),
                "cycles_per_iteration": round(c / iterations, 1),
                "share": round(c / total, 4),
            }
        )
    record = {
        "bench": "cuda_profile",
        "program": program,
        "call": "total",
        "iterations": iterations,
        "calls": len(run.profile_labels),
        "distinct_calls": len(per_label),
        "cycles_per_iteration": round(total / iterations, 1),
        "block": run.block_size,
    }
    if clock_mhz:
        record |= {"clock_mhz": round(clock_mhz, 1), "us_per_iteration": round(total / iterations / clock_mhz, 2)}
    emit(record)


def profile_demo(n: int, top: int) -> float | None:
    """Profiles the demo step; returns the SM clock (MHz) its wall time gives."""
    from numba import cuda

    from dispatchrl.backends import cuda as backend

    before = len(backend.PROFILED)
    step, _, loss, _ = nn.regression_demo(drl.CUDA())
    step(min(n, 100))  # warm: caches and clocks
    cuda.synchronize()
    run = backend.PROFILED[before]
    start_cycles = int(run.read_profile()[0].sum())
    start = time.perf_counter()
    step(n)
    drl.to_numpy(loss)
    seconds = time.perf_counter() - start
    cycles = int(run.read_profile()[0].sum()) - start_cycles
    clock_mhz = cycles / seconds / 1e6 if seconds > 0 else None
    emit({"bench": "cuda_profile", "program": "demo", "call": "wall", "us_per_step": round(seconds / n * 1e6, 2)})
    summarise("demo", run, clock_mhz, top)
    return clock_mhz


def profile_training(algo: str, steps: int, clock_mhz: float | None, top: int) -> None:
    from dispatchrl.backends import cuda as backend
    from dispatchrl.cli import main as cli

    before = len(backend.PROFILED)
    start = time.perf_counter()
    cli(["train", algo, "--env", "pendulum", "--device", "cuda", "--steps", str(steps), "--no-eval", "--json"])
    emit({"bench": "cuda_profile", "program": algo, "call": "wall", "seconds": round(time.perf_counter() - start, 2)})
    for i, run in enumerate(backend.PROFILED[before:]):
        summarise(f"{algo}:{i}", run, clock_mhz, top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--programs", default="demo,td3", help="comma-separated among demo, td3, sac, ppo")
    parser.add_argument("--steps", type=int, default=3000, help="env steps of each training run")
    parser.add_argument("--demo-steps", type=int, default=2000, help="demo steps timed")
    parser.add_argument("--top", type=int, default=25, help="calls printed per kernel, largest first")
    parser.add_argument(
        "--clock-mhz", type=float, default=None, help="SM clock for the µs figures (default: the demo's)"
    )
    args = parser.parse_args()
    programs = [p for p in args.programs.split(",") if p]
    unknown = sorted(set(programs) - {"demo", "td3", "sac", "ppo"})
    if unknown:
        parser.error(f"--programs: unknown {unknown}; expected among demo, td3, sac, ppo")
    from dispatchrl.backends import cuda as backend

    backend.PROFILE = True
    simulated = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
    header = {"bench": "cuda_profile", "simulated": simulated, "numpy": np.__version__}
    if not simulated:
        from numba import cuda

        name = cuda.get_current_device().name
        header["device"] = name.decode() if isinstance(name, bytes) else str(name)
    emit(header)
    clock_mhz = args.clock_mhz
    if "demo" in programs:
        measured = profile_demo(args.demo_steps, args.top)
        clock_mhz = clock_mhz or measured
    for algo in programs:
        if algo != "demo":
            profile_training(algo, args.steps, clock_mhz, args.top)


if __name__ == "__main__":
    main()
