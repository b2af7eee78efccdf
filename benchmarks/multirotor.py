"""The multirotor ("Learning to Fly in Seconds"): training runs over seeds and the env's stepping rate.

- Training: ``dispatchrl train td3 --env multirotor`` (the paper's recipe, 300k steps) per seed, as
  a user runs it (the CLI's keep-best: every 10k steps, the policy with the best success on 100
  held-out flights, ties broken by their hover score; ``--keep-best 0``: the final weights); per
  seed the training wall time, the flight evaluation (``eval_success``: of 100 random initial
  states, the fraction within 0.1 m of the target and slower than 0.2 m/s after 5 s, never having
  left the box; the position RMSE; the median final distance; the hover score). Target: median
  success >= 0.95 with <= 18 s of training (the paper's laptop figure: 18 s, 300k steps).
- Stepping: the native batch (env_step + env_reset_done fused into one compiled CPU step) for N
  envs, env steps per second, median of repeats; from THREADED_FROM envs also on all of Numba's
  threads (DISPATCHRL_ENV_THREADS, in the same run). Target: >= 10M steps/s; the
  paper reports its simulator at "5 months of flight per second" on a laptop GPU (about 1.3e9
  steps/s at 100 Hz).

Prints JSON lines; the first names the machine and its load.
Usage: python benchmarks/multirotor.py [--seeds 5] [--first-seed 0] [--steps 300000] [--keep-best N]
       [--learner-threads 1,2] [--skip-training] [--quick]
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import numba
import numpy as np

import dispatchrl as drl
import dispatchrl.envs as E
from dispatchrl.backends import cpu as cpu_backend
from dispatchrl.envs.multirotor import Multirotor

PAPER = {"train_seconds": 18.0, "steps": 300_000, "note": "Eschmann et al. RA-L 2024, a consumer laptop"}


def emit(**record):
    print(json.dumps(record), flush=True)


def machine() -> dict:
    model = next(
        (line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
        platform.processor(),
    )
    flags = next((line for line in open("/proc/cpuinfo") if line.startswith("flags")), "")
    isa = "avx512f" if " avx512f" in flags else "avx2" if " avx2" in flags else "other"
    return {"cpu": model, "isa": isa, "cores": os.cpu_count(), "load": os.getloadavg()[0]}


def stepping(n: int, repeats: int, quick: bool, threads: int = 1) -> dict:
    os.environ["DISPATCHRL_ENV_THREADS"] = str(threads)
    device, env = drl.CPU(), Multirotor(n)
    state, stream = E.env_state(device, env), drl.rng(device, 0)
    E.env_reset(device, env, state, stream)
    hover = np.full((n, 4), env.parameters.hover_action, np.float32)
    action = drl.asarray(device, hover + np.random.default_rng(0).normal(0, 0.05, hover.shape).astype(np.float32))

    def staged(device):
        E.env_step(device, env, state, action)
        E.env_reset_done(device, env, state, stream)

    step = drl.fuse(device, staged)
    step(2)
    calls = max(1, (200_000 if quick else 2_000_000) // n)
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        step(calls)
        rates.append(n * calls / (time.perf_counter() - start))
    return {"envs": n, "threads": threads, "steps_per_second": statistics.median(rates), "repeats": repeats}


def training(seed: int, steps: int, keep_best: int | None, threads: int) -> dict:
    command = [sys.executable, "-m", "dispatchrl", "train", "td3", "--env", "multirotor", "--seed", str(seed)]
    command += ["--steps", str(steps), "--json"]
    command += [] if keep_best is None else ["--keep-best", str(keep_best)]
    env = dict(os.environ, DISPATCHRL_LEARNER_THREADS=str(threads))
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    keys = (
        "train_seconds",
        "compile_seconds",
        "eval_success",
        "eval_position_rmse",
        "eval_final_position_error",
        "eval_hover_score",
    )
    wall = time.perf_counter() - start
    return {
        "seed": seed,
        "steps": steps,
        "keep_best": keep_best,
        "learner_threads": threads,
        **{k: result[k] for k in keys},
        "wall_seconds": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument(
        "--first-seed", type=int, default=0, help="seeds first..first+N-1 (fresh seeds check a recipe tuned on 0..N-1)"
    )
    parser.add_argument("--steps", type=int, default=300_000)
    parser.add_argument(
        "--keep-best", type=int, default=None, help="passed to the CLI (default: its own; 0: final weights)"
    )
    parser.add_argument("--skip-stepping", action="store_true")
    parser.add_argument("--skip-training", action="store_true")
    parser.add_argument("--quick", action="store_true", help="fewer stepping repeats and calls")
    parser.add_argument(
        "--learner-threads",
        default="1",
        help="DISPATCHRL_LEARNER_THREADS settings, e.g. 1,2: each seed runs with each in turn (the same bits)",
    )
    args = parser.parse_args()
    emit(kind="machine", **machine())
    for n in () if args.skip_stepping else (1, 64, 4096, 65536):
        for t in sorted({1, numba.config.NUMBA_NUM_THREADS}) if n >= cpu_backend.THREADED_FROM else [1]:
            emit(kind="stepping", **stepping(n, 3 if args.quick else 7, args.quick, t), load=os.getloadavg()[0])
    if args.skip_training:
        return
    settings = [int(t) for t in args.learner_threads.split(",")]
    runs: dict[int, list[dict]] = {t: [] for t in settings}
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        for t in settings:  # alternating: this VM's speed moves over minutes
            runs[t].append(training(seed, args.steps, args.keep_best, t))
            emit(kind="training_run", **runs[t][-1], load=os.getloadavg()[0])
    for t, done in runs.items():
        emit(
            kind="training",
            learner_threads=t,
            seeds=len(done),
            median_eval_success=statistics.median(r["eval_success"] for r in done),
            median_train_seconds=statistics.median(r["train_seconds"] for r in done),
            median_position_rmse=statistics.median(r["eval_position_rmse"] for r in done),
            paper=PAPER,
            load=os.getloadavg()[0],
        )


if __name__ == "__main__":
    main()
