"""Reliability of long runs (issue 21), as JSON lines on stdout (progress on stderr):

1. ``divergence_check``: the cost of the in-step divergence check. TD3 Pendulum on CPU, the
   training loop's seconds (``TrainResult.train_seconds``) with ``check_every=0`` (off), the
   default 1000, and 1 (every step, an upper bound), run alternately in this process (each
   variant compiled once first; --pairs rounds, seeds 0..), medians, and the overhead of each as
   % of "off".
2. ``rss``: resident memory (VmRSS) of one TD3 Pendulum CPU run at 100k, 500k and 1M steps
   (--rss-steps lowers the budget; the checkpoints it passes are reported), and its growth
   from the first to the last.
3. ``kill_resume``: --cycles SIGKILL-and-resume cycles of a periodic-checkpointing TD3 run (kill
   at a random chunk boundary, in the middle of a checkpoint write, or at a random moment), then
   a resume to the end, compared array by array with an uninterrupted run.

    python benchmarks/reliability.py [--pairs 5] [--steps 10000] [--rss-steps 1000000] [--cycles 4]
                                     [--skip-rss] [--skip-kill]

No thresholds: the numbers are reported as measured (the machine may be shared).
"""

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WORKER = REPO / "tests" / "kill_resume_worker.py"
ENV = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}

__all__ = ["divergence_check", "kill_resume", "rss"]


def log(*parts: object) -> None:
    print("[reliability]", *parts, file=sys.stderr, flush=True)


def emit(record: dict) -> None:
    print(json.dumps(record), flush=True)


def _train_seconds(steps: int, seed: int, check_every: int) -> float:
    import dispatchrl as drl
    from dispatchrl.algorithms import td3

    config = td3.Config(total_steps=steps, check_every=check_every)
    return td3.train(drl.CPU(), "pendulum", config, seed=seed, progress=False).train_seconds


def _check_seconds(repeats: int = 2000) -> float:
    """One divergence check of a default TD3 Pendulum state on CPU: the check's compiled kernels
    over the watched arrays, timed alone (the best of several rounds: robust on a shared machine)."""
    import dispatchrl as drl
    from dispatchrl.algorithms import td3
    from dispatchrl.algorithms.driver import watched_quantities
    from dispatchrl.algorithms.envspec import resolve_env
    from dispatchrl.algorithms.runs import build_state
    from dispatchrl.kernels.core.cpu import nonfinite_flag_kernel
    from dispatchrl.staging import raw

    state = build_state(td3, drl.CPU(), resolve_env("pendulum"), td3.Config(), 0)
    arrays = [raw(a) for _, a in watched_quantities(state)]
    flag = raw(drl.zeros(drl.CPU(), 1, np.int64))
    for a in arrays:
        nonfinite_flag_kernel(a, flag, 1)
    best = float("inf")
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(repeats):
            for code, a in enumerate(arrays, 1):
                nonfinite_flag_kernel(a, flag, code)
        best = min(best, (time.perf_counter() - start) / repeats)
    return best  # includes a Python call per array: inside the fused step there is none


def divergence_check(pairs: int, steps: int) -> None:
    settings = (0, 1000, 1)
    for k in settings:  # compile (or load) each variant once before timing
        _train_seconds(min(steps, 1000), 0, k)
    seconds: dict[int, list[float]] = {k: [] for k in settings}
    for pair in range(pairs):
        order = settings if pair % 2 == 0 else settings[::-1]  # alternate, so drift hits all alike
        for k in order:
            seconds[k].append(_train_seconds(steps, pair, k))
            emit(
                {
                    "bench": "divergence_check_run",
                    "pair": pair,
                    "check_every": k,
                    "steps": steps,
                    "train_seconds": seconds[k][-1],
                }
            )
    off = statistics.median(seconds[0])
    per_check = _check_seconds()
    emit(
        {
            "bench": "divergence_check_kernels",
            "seconds_per_check": per_check,
            "percent_of_step_time_at_check_every_1000": round(100 * per_check / (1000 * off / steps), 5),
            "percent_of_step_time_at_check_every_1": round(100 * per_check / (off / steps), 3),
        }
    )
    emit(
        {
            "bench": "divergence_check",
            "device": "cpu",
            "algo": "td3",
            "env": "pendulum",
            "steps": steps,
            "pairs": pairs,
            "median_train_seconds": {str(k): round(statistics.median(v), 4) for k, v in seconds.items()},
            "overhead_percent": {
                str(k): round(100 * (statistics.median(seconds[k]) / off - 1), 2) for k in settings[1:]
            },
            "spread_percent_off": round(100 * (max(seconds[0]) - min(seconds[0])) / off, 1),
        }
    )


def _rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def rss(total: int) -> None:
    import dispatchrl as drl
    from dispatchrl.algorithms import td3

    marks = sorted({m for m in (100_000, 500_000, 1_000_000) if m <= total} | {total})  # a smaller budget: its end too
    seen: dict[int, int] = {}

    def hook(run) -> None:
        for mark in marks:
            if mark not in seen and run.steps >= mark:
                seen[mark] = _rss_bytes()
                emit({"bench": "rss_at", "steps": run.steps, "rss_mib": round(seen[mark] / 2**20, 1)})

    start = time.perf_counter()
    result = td3.train(drl.CPU(), "pendulum", td3.Config(total_steps=total), seed=0, progress=False, hooks=(hook,))
    first, last = seen[marks[0]], seen[marks[-1]]
    emit(
        {
            "bench": "rss",
            "device": "cpu",
            "algo": "td3",
            "env": "pendulum",
            "steps": total,
            "rss_mib": {str(m): round(v / 2**20, 1) for m, v in seen.items()},
            "growth_percent": round(100 * (last / first - 1), 2),
            "train_seconds": round(result.train_seconds, 1),
            "wall_seconds": round(time.perf_counter() - start, 1),
        }
    )


def _worker(save: Path, resume: bool, steps: int, slow_save: bool = False) -> subprocess.Popen:
    args = [
        "td3",
        "--steps",
        str(steps),
        "--seed",
        "7",
        "--no-eval",
        "--json",
        "--save-every",
        str(steps // 6),
        "--keep",
        "2",
        "--save",
        str(save),
        *(["--resume", str(save)] if resume else []),
    ]
    env = {**ENV, **({"SLOW_SAVE": "1"} if slow_save else {})}
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def _read_until(process: subprocess.Popen, predicate) -> str:
    for line in process.stdout:
        if predicate(line.strip()):
            return line.strip()
    return ""


def kill_resume(cycles: int, steps: int = 6000) -> None:
    import numpy as np

    from dispatchrl import checkpoint

    rng = random.Random()
    with tempfile.TemporaryDirectory() as tmp:
        reference, path = Path(tmp) / "reference", Path(tmp) / "killed"
        done = _worker(reference, False, steps)
        done.communicate()
        expected = checkpoint.load(reference)[1]
        kinds = ["boundary", "during save", "random moment"]
        for cycle in range(cycles):
            kind = kinds[cycle % len(kinds)]
            resume = bool(list(path.glob("step-*.npz")))
            process = _worker(path, resume, steps, slow_save=kind == "during save")
            if kind == "boundary":
                target = rng.randrange(steps // 10, steps)
                where = _read_until(process, lambda line, t=target: line.startswith("STEP ") and int(line[5:]) >= t)
            elif kind == "during save":
                where = _read_until(process, lambda line: line == "SAVING")
            else:
                where = _read_until(process, lambda line: line.startswith("STEP "))
                delay = rng.uniform(0, 0.3)
                time.sleep(delay)
                where = f"{delay:.3f} s after {where}"
            process.send_signal(signal.SIGKILL)
            process.wait()
            newest = checkpoint.latest(path).name if list(path.glob("step-*.npz")) else None
            emit(
                {
                    "bench": "kill_resume_cycle",
                    "cycle": cycle,
                    "kind": kind,
                    "killed_at": where or "(before output)",
                    "exit": process.returncode,
                    "newest_complete_checkpoint": newest,
                }
            )
        finish = _worker(path, True, steps)
        _, err = finish.communicate()
        if finish.returncode != 0:
            emit({"bench": "kill_resume", "cycles": cycles, "result": "resume failed", "stderr": err[-500:]})
            return
        resumed = checkpoint.load(path)[1]
        identical = resumed.keys() == expected.keys() and all(np.array_equal(resumed[k], expected[k]) for k in expected)
        emit(
            {
                "bench": "kill_resume",
                "device": "cpu",
                "algo": "td3",
                "steps": steps,
                "cycles": cycles,
                "arrays": len(expected),
                "bit_identical": bool(identical),
            }
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--rss-steps", type=int, default=1_000_000)
    parser.add_argument("--cycles", type=int, default=4)
    parser.add_argument("--skip-overhead", action="store_true")
    parser.add_argument("--skip-rss", action="store_true")
    parser.add_argument("--skip-kill", action="store_true")
    args = parser.parse_args()
    if not args.skip_overhead:
        log("divergence check overhead")
        divergence_check(args.pairs, args.steps)
    if not args.skip_kill:
        log("kill-resume cycles")
        kill_resume(args.cycles)
    if not args.skip_rss:
        log(f"RSS over {args.rss_steps} steps")
        rss(args.rss_steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
