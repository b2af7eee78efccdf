"""The cost of metrics logging on TD3 (Pendulum, 10,000 steps, CPU): runs with and without a
logger (CSV + TensorBoard) alternate for --pairs pairs, and the time spent inside the logging hook
is measured directly, as a fraction of each logged run's training seconds (the A/B difference is
noisier than the cost on a shared machine). Prints one JSON line.

    python benchmarks/logging_overhead.py [--pairs 5] [--steps 10000] [--logger csv,tensorboard]
"""

import argparse
import json
import statistics
import tempfile
import time

import dispatchrl as drl
from dispatchrl import loggers
from dispatchrl.algorithms import td3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--steps", type=int, default=10_000)
    p.add_argument("--logger", default="csv,tensorboard")
    args = p.parse_args()
    config = td3.Config(total_steps=args.steps)
    hook_seconds = [0.0]
    timed = loggers.MetricsHook.__call__

    def timed_call(self, run):  # the whole logging cost at a chunk boundary: reads, rows, flushes
        start = time.perf_counter()
        timed(self, run)
        hook_seconds[0] += time.perf_counter() - start

    loggers.MetricsHook.__call__ = timed_call
    td3.train(drl.CPU(), "pendulum", config, progress=False)  # warm-up: compile or load the cache
    plain, logged, fractions = [], [], []
    for seed in range(args.pairs):
        plain.append(td3.train(drl.CPU(), "pendulum", config, seed=seed, progress=False).train_seconds)
        with tempfile.TemporaryDirectory() as log_dir:
            logger = loggers.make_logger(args.logger, log_dir)
            hook_seconds[0] = 0.0
            result = td3.train(drl.CPU(), "pendulum", config, seed=seed, progress=False, logger=logger)
            logger.close()
        logged.append(result.train_seconds)
        fractions.append(hook_seconds[0] / result.train_seconds)
    print(
        json.dumps(
            {
                "steps": args.steps,
                "logger": args.logger,
                "train_seconds_without": [round(s, 4) for s in plain],
                "train_seconds_with": [round(s, 4) for s in logged],
                "median_ratio_with_over_without": round(statistics.median(logged) / statistics.median(plain), 4),
                "logging_hook_fraction_of_train_seconds": [round(f, 5) for f in fractions],
                "median_logging_hook_fraction": round(statistics.median(fractions), 5),
            }
        )
    )


if __name__ == "__main__":
    main()
