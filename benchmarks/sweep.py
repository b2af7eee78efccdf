"""Sweep cost (issue 19): a TD3 Pendulum study with ``dispatchrl sweep`` (Optuna, a process pool
of the cores), reporting the wall time, each trial's compile seconds, the best evaluation return
and the share of the wall time spent compiling (target < 10%; about 80% before float
hyperparameters became run-time values of the fused CPU step).

    python benchmarks/sweep.py [--trials 20] [--steps 10000] [--seeds 0] [--workers N] [--out DIR]

Compile seconds of a trial are the driver's ``compile_seconds`` (building the state, tracing and
compiling or loading the fused steps) summed over its seeds; the parent's warm-up run (compiling
the space's first point once for the pool) counts as compile too. One JSON line at the end.
"""

import argparse
import json
import os
import tempfile
from pathlib import Path

from dispatchrl.sweep import parse_spec, sweep

SPACE = {
    "actor_lr": {"log_uniform": [1e-4, 3e-3]},
    "critic_lr": {"log_uniform": [1e-4, 3e-3]},
    "gamma": {"uniform": [0.95, 0.995]},
    "batch_size": {"choice": [64, 100, 256]},
    "hidden": {"choice": [[64, 64], [128, 128]]},
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--steps", type=int, default=10_000)
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--workers", type=int, default=None, help="default: the cores")
    p.add_argument("--out", default=None, help="study folder (default: a temporary one)")
    args = p.parse_args()
    spec = parse_spec(
        {
            "algo": "td3",
            "env": "pendulum",
            "steps": args.steps,
            "trials": args.trials,
            "seeds": args.seeds,
            "objective": "eval_return",
            "space": SPACE,
        }
    )
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(args.out or Path(scratch) / "study")
        summary = sweep(spec, out, workers=args.workers)
    trial_compile = [c for c in summary["trial_compile_seconds"] if c is not None]
    compile_total = summary["warm_compile_seconds"] + sum(trial_compile)
    # trials run in parallel: their compile seconds are spread over the workers like the rest
    workers = args.workers or spec.workers or os.cpu_count() or 1
    print(
        json.dumps(
            {
                "benchmark": "sweep",
                "trials": summary["trials"],
                "complete": summary["complete"],
                "pruned": summary["pruned"],
                "failed": summary["failed"],
                "workers": workers,
                "wall_seconds": summary["wall_seconds"],
                "warm_compile_seconds": summary["warm_compile_seconds"],
                "trial_compile_seconds": trial_compile,
                "compile_seconds_total": round(compile_total, 3),
                "compile_share_of_wall": round(
                    (summary["warm_compile_seconds"] + sum(trial_compile) / workers) / summary["wall_seconds"], 4
                ),
                "best_eval_return": summary.get("best_objective"),
                "best_params": summary.get("best_params"),
                "target_compile_share": 0.10,
            }
        )
    )


if __name__ == "__main__":
    main()
