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
4. ``faults`` (issue 40): `dispatchrl train` runs meeting a full disk (a small tmpfs, mounted
   when this runs as root; otherwise those cases are reported skipped) at the final save, at a
   periodic save and before training; a full disk and damaged files (truncated ``fused_*.py``,
   ``.nbi``, ``.nbc``, C ``.so``) under the compile cache (cpu and c devices); two runs started
   on one ``--save`` path. Each record says what was lost (``lost``: must be empty), what was
   left behind, and the peak resident memory of each process (``peak_rss_mib``).

    python benchmarks/reliability.py [--pairs 5] [--steps 10000] [--rss-steps 1000000] [--cycles 4]
                                     [--skip-overhead] [--skip-rss] [--skip-kill] [--skip-faults]

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
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WORKER = REPO / "tests" / "kill_resume_worker.py"
ENV = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}

__all__ = ["divergence_check", "faults", "kill_resume", "rss"]


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
    from dispatchrl.kernels.core.cpu import nonfinite_flag_kernel
    from dispatchrl.staging import raw
    from dispatchrl.training.driver import watched_quantities
    from dispatchrl.training.envspec import resolve_env
    from dispatchrl.training.runs import build_state

    state = build_state(td3, drl.CPU(), resolve_env("pendulum"), td3.Config(), 0)
    arrays = [raw(a) for _, a in watched_quantities(td3, state)]
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


# ---------------------------------------------------------------- faults (issue 40)

#: `dispatchrl train ARGS` in which another program fills the disk FILL_DISK as training starts
#: (FILL_AT=start) or after the first periodic checkpoint (FILL_AT=first_save)
FAULT_WORKER = """
import os, sys
from dispatchrl import cli
from dispatchrl.training import driver

def fill():
    with open(os.path.join(os.environ["FILL_DISK"], "filler"), "ab", buffering=0) as f:
        try:
            while True:
                f.write(bytes(1 << 16))
        except OSError:
            pass

if os.environ.get("FILL_AT") == "start":
    started = driver.Progress.started
    driver.Progress.started = lambda self, run: (started(self, run), fill())[0]
elif os.environ.get("FILL_AT") == "first_save":
    save = driver.PeriodicCheckpoint.save
    driver.PeriodicCheckpoint.save = lambda self, run: (save(self, run), fill())[0]
sys.exit(cli.main(["train", *sys.argv[1:]]))
"""

#: a fused step on the device argv[1] (cpu: a generated module and Numba's cache of it and of its
#: kernel; c: a generated C library)
FUSED_STEP = """
import sys
import numpy as np
import dispatchrl as drl
cpu = drl.devices.device_from_name(sys.argv[1])
a, out = drl.asarray(cpu, np.arange(6.0).reshape(2, 3) - 2), drl.zeros(cpu, (2, 3), np.float64)
drl.fuse(cpu, lambda d: drl.relu(d, a, out))(3)
print("RESULT", drl.to_numpy(out).tolist())
"""
FUSED_RESULT = "RESULT [[0.0, 0.0, 0.0], [1.0, 2.0, 3.0]]"


def _start(code: str, args: list[str], env: dict | None = None, log: Path | None = None) -> tuple:
    out = tempfile.TemporaryFile("w+")
    err = tempfile.TemporaryFile("w+")
    process = subprocess.Popen([sys.executable, "-c", code, *args], stdout=out, stderr=err, env={**ENV, **(env or {})})
    return process, out, err


def _finish(started: tuple) -> dict:
    """Wait for a process of :func:`_start`: its exit status, output and peak resident memory."""
    process, out, err = started
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    out.seek(0)
    err.seek(0)
    return {
        "rc": process.returncode,
        "out": out.read(),
        "err": err.read(),
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
    }


def _run(code: str, args: list[str], env: dict | None = None) -> dict:
    return _finish(_start(code, args, env))


def _last_json(out: str) -> dict:
    for line in reversed(out.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {}


def _temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*.tmp"))


def _mount_tmpfs(folder: Path, size: str) -> str | None:
    """None once a tmpfs of ``size`` is mounted on ``folder``, else why not."""
    folder.mkdir(parents=True, exist_ok=True)
    run = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True, text=True
    )
    return None if run.returncode == 0 else f"cannot mount a tmpfs ({run.stderr.strip() or run.returncode}; needs root)"


def _same_checkpoint(a: tuple, b: tuple) -> bool:
    return a[0] == b[0] and a[1].keys() == b[1].keys() and all(np.array_equal(a[1][k], b[1][k]) for k in a[1])


def _on_tmpfs(folder: Path, size: str, case: str, body: Callable[[Path], dict]) -> None:
    """The fault ``case`` on a tmpfs of ``size`` mounted on ``folder``: emits its record (what
    ``body(folder)`` returns), then unmounts; or emits the case skipped where none can be mounted."""
    why = _mount_tmpfs(folder, size)
    if why is not None:
        emit({"bench": "faults", "case": case, "skipped": why})
        return
    emit({"bench": "faults", "case": case, **body(folder)})
    subprocess.run(["umount", "-l", str(folder)])


#: the `dispatchrl train` arguments the full-disk cases start from
TRAIN = ["td3", "--no-eval", "--json"]


def _full_disk_at_final_save(disk: Path, steps: int) -> dict:
    """A good checkpoint, then a resumed run whose disk fills as it trains."""
    from dispatchrl import checkpoint

    first = _run(FAULT_WORKER, [*TRAIN, "--steps", str(steps), "--save", str(disk / "run")])
    before = checkpoint.load(disk / "run")
    second = _run(
        FAULT_WORKER,
        [*TRAIN, "--resume", str(disk / "run"), "--steps", str(2 * steps), "--save", str(disk / "run")],
        {"FILL_DISK": str(disk), "FILL_AT": "start"},
    )
    summary = _last_json(second["out"])
    lost = [
        what
        for what, kept in (
            ("the run's result (no JSON summary)", summary.get("recent_return") is not None),
            ("the previous checkpoint", _same_checkpoint(before, checkpoint.load(disk / "run"))),
        )
        if not kept
    ]
    return {
        "disk": "tmpfs 32m, filled as training starts",
        "exit": second["rc"],
        "status": summary.get("status"),
        "steps": summary.get("steps"),
        "recent_return": summary.get("recent_return"),
        "last_good_checkpoint": summary.get("last_good_checkpoint"),
        "error": summary.get("error"),
        "traceback": "Traceback" in second["err"],
        "lost": lost,
        "left_behind": _temporaries(disk),
        "peak_rss_mib": [first["peak_rss_mib"], second["peak_rss_mib"]],
    }


def _full_disk_at_periodic_save(disk: Path, steps: int) -> dict:
    """The disk fills after the first checkpoint of a rotating run."""
    from dispatchrl import checkpoint

    run = _run(
        FAULT_WORKER,
        [
            *TRAIN,
            "--steps",
            str(steps),
            "--save-every",
            str(steps // 4),
            "--keep",
            "2",
            "--save",
            str(disk / "run"),
        ],
        {"FILL_DISK": str(disk), "FILL_AT": "first_save"},
    )
    summary = _last_json(run["out"])
    good = summary.get("last_good_checkpoint")
    loads = good is not None and checkpoint.load(disk / "run")[0]["steps"] == steps // 4
    lost = [] if summary.get("recent_return") is not None and loads else ["the run's result or its last checkpoint"]
    return {
        "disk": "tmpfs 32m, filled after the first save",
        "exit": run["rc"],
        "status": summary.get("status"),
        "stopped_at_step": summary.get("steps"),
        "last_good_checkpoint": good,
        "last_good_loads": loads,
        "traceback": "Traceback" in run["err"],
        "lost": lost,
        "left_behind": _temporaries(disk),
        "peak_rss_mib": run["peak_rss_mib"],
    }


def _no_room_for_checkpoints(disk: Path, steps: int) -> dict:
    """Before training: a disk without room for --keep 3 + 1 checkpoints."""
    start = time.perf_counter()
    run = _run(
        FAULT_WORKER, [*TRAIN, "--steps", str(steps), "--save-every", str(steps // 4), "--save", str(disk / "run")]
    )
    summary = _last_json(run["out"])
    return {
        "disk": "tmpfs 1m",
        "exit": run["rc"],
        "status": summary.get("status"),
        "error": summary.get("error"),
        "trained": "train_seconds" in summary,
        "wall_seconds": round(time.perf_counter() - start, 2),
        # refused before training, or the run's training (it trained, then could not save)
        "lost": [] if summary.get("status") == "error" else ["the run's training"],
        "left_behind": _temporaries(disk),
        "peak_rss_mib": run["peak_rss_mib"],
    }


def _full_compile_cache(disk: Path, device: str, leave: int) -> dict:
    """A fused step whose compile cache is on a disk filled but for ``leave`` bytes."""
    with open(disk / "filler", "ab", buffering=0) as f:
        try:
            while True:
                f.write(bytes(1 << 16))
        except OSError:
            pass
    os.truncate(disk / "filler", max(0, (disk / "filler").stat().st_size - leave))
    run = _run(FUSED_STEP, [device], {"DISPATCHRL_CACHE_DIR": str(disk / "cache")})
    warnings = [
        line.split("RuntimeWarning: ", 1)[1][:160] for line in run["err"].splitlines() if "RuntimeWarning" in line
    ]
    return {
        "disk": "tmpfs 1m",
        "exit": run["rc"],
        "result_correct": FUSED_RESULT in run["out"],
        "traceback": "Traceback" in run["err"],
        "warnings": warnings,
        "lost": [] if FUSED_RESULT in run["out"] else ["the run"],
        "left_behind": _temporaries(disk),
        "peak_rss_mib": run["peak_rss_mib"],
    }


def _full_disk_cases(tmp: Path, steps: int) -> None:
    _on_tmpfs(tmp / "final", "32m", "full disk at the final save", partial(_full_disk_at_final_save, steps=steps))
    _on_tmpfs(
        tmp / "periodic", "32m", "full disk at a periodic save", partial(_full_disk_at_periodic_save, steps=steps)
    )
    _on_tmpfs(tmp / "small", "1m", "no room for the checkpoints", partial(_no_room_for_checkpoints, steps=steps))
    # under the compile cache: a full disk, and one with a few kB left (saves fail mid-compile)
    for device, leave in (("cpu", 0), ("cpu", 8192), ("c", 0), ("c", 8192)):
        _on_tmpfs(
            tmp / f"cache-{device}-{leave}",
            "1m",
            f"full disk under the compile cache ({device}, {leave} bytes free)",
            partial(_full_compile_cache, device=device, leave=leave),
        )


def _damaged_cache_cases(tmp: Path) -> None:
    import shutil

    filled = tmp / "cache"
    for device in ("cpu", "c"):
        _run(FUSED_STEP, [device], {"DISPATCHRL_CACHE_DIR": str(filled)})
    for pattern, device in (("fused_*.py", "cpu"), ("*.nbi", "cpu"), ("*.nbc", "cpu"), ("*.so", "c")):
        cache = tmp / f"damaged-{pattern.replace('*', '')}"
        shutil.copytree(filled, cache)
        files = list(cache.rglob(pattern))
        for file in files:
            os.truncate(file, file.stat().st_size // 2)
        runs = [_run(FUSED_STEP, [device], {"DISPATCHRL_CACHE_DIR": str(cache)}) for _ in range(2)]
        emit(
            {
                "bench": "faults",
                "case": f"damaged compile cache ({device}: {pattern} truncated)",
                "files_damaged": len(files),
                "exit": [r["rc"] for r in runs],
                "result_correct": [FUSED_RESULT in r["out"] for r in runs],
                "warnings": [r["err"].count("RuntimeWarning") for r in runs],
                "traceback": any("Traceback" in r["err"] for r in runs),
                "lost": [] if all(r["rc"] == 0 and FUSED_RESULT in r["out"] for r in runs) else ["a run"],
                "peak_rss_mib": [r["peak_rss_mib"] for r in runs],
            }
        )


def _concurrent_save_case(tmp: Path, steps: int) -> None:
    from dispatchrl import checkpoint

    path = tmp / "shared"
    args = ["td3", "--no-eval", "--json", "--steps", str(steps), "--save-every", str(steps // 4), "--save", str(path)]
    started = [_start(FAULT_WORKER, [*args, "--seed", str(seed)]) for seed in (1, 2)]
    runs = [_finish(s) for s in started]
    summaries = [_last_json(r["out"]) for r in runs]
    seeds = sorted({checkpoint.load(p)[0]["seed"] for p in path.glob("step-*.npz")})
    finished = [s.get("seed") for s in summaries if s.get("status") == "ok"]
    # nothing lost: every run either finished with its own checkpoints or was refused and said so
    refused = [s.get("error") for s in summaries if s.get("status") == "error"]
    lost = (
        [] if len(finished) + len(refused) == 2 and seeds == sorted(finished) else ["a run's checkpoints were replaced"]
    )
    emit(
        {
            "bench": "faults",
            "case": "two runs on one --save path",
            "exits": [r["rc"] for r in runs],
            "statuses": [s.get("status") for s in summaries],
            "refused": refused,
            "seeds_in_folder": seeds,
            "lost": lost,
            "left_behind": _temporaries(path),
            "peak_rss_mib": [r["peak_rss_mib"] for r in runs],
        }
    )


def faults(steps: int = 2000) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        _full_disk_cases(Path(tmp), steps)
        _damaged_cache_cases(Path(tmp))
        _concurrent_save_case(Path(tmp), steps)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--rss-steps", type=int, default=1_000_000)
    parser.add_argument("--cycles", type=int, default=4)
    parser.add_argument("--skip-overhead", action="store_true")
    parser.add_argument("--skip-rss", action="store_true")
    parser.add_argument("--skip-kill", action="store_true")
    parser.add_argument("--skip-faults", action="store_true")
    args = parser.parse_args()
    if not args.skip_overhead:
        log("divergence check overhead")
        divergence_check(args.pairs, args.steps)
    if not args.skip_kill:
        log("kill-resume cycles")
        kill_resume(args.cycles)
    if not args.skip_faults:
        log("faults: full disk, damaged compile cache, concurrent --save")
        faults()
    if not args.skip_rss:
        log(f"RSS over {args.rss_steps} steps")
        rss(args.rss_steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
