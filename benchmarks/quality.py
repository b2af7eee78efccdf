"""Learning quality: does each algorithm reach good returns, across seeds?

    python benchmarks/quality.py [--algos td3,sac] [--pendulum-seeds 10] [--acrobot-seeds 5]

Prints one JSON line per run and one summary line per (algorithm, env). Targets (issue 5): TD3 and
SAC on Pendulum-v1, 10k steps, 10 seeds: median evaluation return >= -170 and worst >= -400. The
continuous Acrobot (50k steps, 5 seeds) reports how many seeds swing up (evaluation return > -400,
i.e. the tip reaches the line within the 500-step limit on average).
"""

import argparse
import json
import statistics

import numpy as np

import dispatchrl as drl
from dispatchrl.algorithms import common

SWING_UP_RETURN = -400.0


def emit(**record):
    print(json.dumps(record), flush=True)


def off_policy(algos, pendulum_seeds, acrobot_seeds):
    """TD3 and SAC (issue 5) on Pendulum 10k and continuous Acrobot 50k."""
    for name in algos:
        algo = {"td3": drl.td3, "sac": drl.sac}[name]
        for env, steps, seeds in (("pendulum", 10_000, pendulum_seeds), ("acrobot", 50_000, acrobot_seeds)):
            evals = []
            for seed in range(seeds):
                result = algo.train(drl.CPU(), env, algo.Config(total_steps=steps), seed=seed, progress=False)
                mean, _ = common.evaluate(result.policy, result.spec.eval_id)
                evals.append(mean)
                emit(benchmark="quality", algo=name, env=env, seed=seed, steps=steps, eval_return=round(mean, 2),
                     train_seconds=round(result.train_seconds, 3))
            if not evals:
                continue
            summary = {"benchmark": "quality", "algo": name, "env": env, "seeds": seeds, "steps": steps,
                       "median_eval_return": round(statistics.median(evals), 2),
                       "worst_eval_return": round(min(evals), 2), "eval_returns": [round(e, 1) for e in evals]}
            if env == "pendulum":
                summary.update(target="median >= -170 and worst >= -400",
                               meets_target=bool(np.median(evals) >= -170 and min(evals) >= -400))
            else:
                summary.update(swung_up=int(sum(e > SWING_UP_RETURN for e in evals)))
            emit(**summary)


FAMILIES = {"td3": off_policy, "sac": off_policy}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algos", default="td3,sac")
    parser.add_argument("--pendulum-seeds", type=int, default=10)
    parser.add_argument("--acrobot-seeds", type=int, default=5)
    args = parser.parse_args()
    algos = [a for a in args.algos.split(",") if a]
    unknown = sorted(set(algos) - set(FAMILIES))
    if unknown:
        parser.error(f"unknown algorithms {unknown}; choose from {sorted(FAMILIES)}")
    off = [a for a in algos if FAMILIES[a] is off_policy]
    if off:
        off_policy(off, args.pendulum_seeds, args.acrobot_seeds)


if __name__ == "__main__":
    main()
