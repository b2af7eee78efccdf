"""Learning quality: does each algorithm reach good returns, across seeds?

    python benchmarks/quality.py [--algos td3,sac] [--pendulum-seeds 10] [--acrobot-seeds 5]
    python benchmarks/quality.py --algos td3 --acrobot-seeds 0 --pendulum-seeds 5 --set prioritized=true
    python benchmarks/quality.py --algos ppo [--ppo-pendulum-seeds 5] [--ppo-ant-seeds 2] [--ppo-ant-steps 1000000]
    python benchmarks/quality.py --device c --acrobot-seeds 0   # the same seeds on the generated-C device
    python benchmarks/quality.py --pendulum-seeds 100 --acrobot-seeds 0 --keep-best 1000   # as the CLI deploys
    python benchmarks/quality.py --algos "" --discrete ppo,dqn [--discrete-seeds 5] [--discrete-envs CartPole-v1]

Prints one JSON line per run and one summary line per (algorithm, env). Targets (issue 5): TD3 and
SAC on Pendulum-v1, 10k steps, 10 seeds: median evaluation return >= -170 and worst >= -400 (the
summary also counts the seeds below -400; --pendulum-seeds 40 estimates that rate). The
continuous Acrobot (50k steps, 5 seeds) reports how many seeds swing up (evaluation return > -400,
i.e. the tip reaches the line within the 500-step limit on average).
PPO (issue 6): Pendulum with its zoo config, 5 seeds, median evaluation return >= -250; Ant-v5 for
1M steps on 2 seeds, the learning curve to CSV and the env-steps/s of the whole training loop.
Discrete actions (issue 36), each algorithm's default config and budget for the env, 5 seeds,
deterministic evaluation of 10 episodes: DQN and PPO on CartPole-v1 median >= 475 and worst >= 400;
DQN on Acrobot-v1 median >= -100 and on MountainCar-v0 median >= -130.
"""

import argparse
import json
import statistics
from dataclasses import replace

import numpy as np

import dispatchrl as drl
from dispatchrl.cli import KEEP_BEST_EPISODES
from dispatchrl.training import EvalCallback, evaluate

SWING_UP_RETURN = -400.0


def emit(**record):
    print(json.dumps(record), flush=True)


def where(algo, env, device):
    """The fields that open every record of (algorithm, env) trained on ``device``."""
    return {"benchmark": "quality", "algo": algo, "env": env, "device": repr(device)}


def returns_summary(evals):
    """The summary's fields of the seeds' evaluation returns ``evals``."""
    return {
        "median_eval_return": round(statistics.median(evals), 2),
        "worst_eval_return": round(min(evals), 2),
        "eval_returns": [round(e, 1) for e in evals],
    }


def off_policy(algos, pendulum_seeds, acrobot_seeds, overrides=(), device=None, keep_best=0):
    """TD3 and SAC (issue 5) on Pendulum 10k and continuous Acrobot 50k; ``overrides`` are
    ``--set key=value`` pairs on the config (e.g. prioritized=true, issue 17). ``keep_best`` N > 0:
    deploy the best of evaluations every N steps as the CLI does (issue 34); the final policy's
    evaluation is reported beside it (``final_eval_return``), from the same run."""
    from dispatchrl.cli import _parse_overrides

    device = device or drl.CPU()

    for name in algos:
        algo = {"td3": drl.td3, "sac": drl.sac}[name]
        settings = dict(pair.partition("=")[::2] for pair in overrides)
        for env, steps, seeds in (("pendulum", 10_000, pendulum_seeds), ("acrobot", 50_000, acrobot_seeds)):
            evals, finals = [], []
            for seed in range(seeds):
                config = _parse_overrides(replace(algo.config_for(env), total_steps=steps), list(overrides))
                hooks = (EvalCallback(keep_best, KEEP_BEST_EPISODES, deploy_best=True),) if keep_best else ()
                result = algo.train(device, env, config, seed=seed, progress=False, hooks=hooks)
                mean, _ = evaluate(result.policy, result.spec.eval_id)
                evals.append(mean)
                extra = {}
                if keep_best:
                    final, _ = evaluate(result.spec.deployed_policy(algo, result.state), result.spec.eval_id)
                    finals.append(final)
                    extra = {
                        "keep_best": keep_best,
                        "policy_steps": result.policy_steps,
                        "final_eval_return": round(final, 2),
                    }
                emit(
                    **where(name, env, device),
                    seed=seed,
                    steps=steps,
                    eval_return=round(mean, 2),
                    train_seconds=round(result.train_seconds, 3),
                    settings=settings,
                    **extra,
                )
            if not evals:
                continue
            summary = {**where(name, env, device), "seeds": seeds, "steps": steps, "settings": settings}
            summary.update(returns_summary(evals))
            if finals:  # the same runs' final policies (what keep_best 0 deploys)
                summary.update(
                    keep_best=keep_best,
                    final_median_eval_return=round(statistics.median(finals), 2),
                    final_seeds_below_minus_400=int(sum(e < -400 for e in finals)),
                )
            if env == "pendulum":
                # the rate says more than the worst seed: a policy snapshot at exactly 10k steps
                # sometimes sits in a short collapse (NOTES.md), so run more seeds to estimate it
                summary.update(
                    target="median >= -170 and worst >= -400",
                    meets_target=bool(np.median(evals) >= -170 and min(evals) >= -400),
                    seeds_below_minus_400=int(sum(e < -400 for e in evals)),
                )
            else:
                summary.update(swung_up=int(sum(e > SWING_UP_RETURN for e in evals)))
            emit(**summary)


def _single_threaded_blas():
    """BLAS inside fused steps is called on small matrices: its own threads only contend with the
    training loop on a shared machine (2 cores here), so pin it to one thread when possible."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        import contextlib

        return contextlib.nullcontext()
    return threadpool_limits(1)


def on_policy(algos, pendulum_seeds, ant_seeds, ant_steps=1_000_000, ant_csv="ppo_ant_curve.csv", device=None):
    """PPO (issue 6): Pendulum with its zoo config over ``pendulum_seeds`` seeds (target: median
    evaluation return >= -250), Ant-v5 for ``ant_steps`` steps over ``ant_seeds`` seeds with every
    training episode written to ``ant_csv`` (seed, env_steps, return, length) and the env-steps/s of
    the whole training loop (env stepping included). ``device`` trains Pendulum; Ant runs on the CPU."""
    import csv

    device = device or drl.CPU()

    ppo = drl.ppo
    with _single_threaded_blas():
        evals = []
        for seed in range(pendulum_seeds):
            result = ppo.train(device, "pendulum", ppo.config_for("pendulum"), seed=seed, progress=False)
            mean, _ = evaluate(result.policy, result.spec.eval_id)
            evals.append(mean)
            emit(
                **where("ppo", "pendulum", device),
                seed=seed,
                steps=result.steps,
                eval_return=round(mean, 2),
                train_seconds=round(result.train_seconds, 3),
                env_steps_per_second=round(result.steps / result.train_seconds),
            )
        if evals:
            emit(
                **where("ppo", "pendulum", device),
                seeds=pendulum_seeds,
                steps=result.steps,
                **returns_summary(evals),
                target="median >= -250",
                meets_target=bool(statistics.median(evals) >= -250),
            )
        if not ant_seeds:
            return
        finals = []
        with open(ant_csv, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["seed", "env_steps", "episode_return", "episode_length"])
            for seed in range(ant_seeds):
                config = ppo.config_for("ant")
                config.total_steps = ant_steps
                result = ppo.train(drl.CPU(), "ant", config, seed=seed, progress=False)
                history = result.history
                for row in zip(history["steps"], history["returns"], history["lengths"]):
                    writer.writerow([seed, int(row[0]), round(float(row[1]), 3), int(row[2])])
                f.flush()
                mean, _ = evaluate(result.policy, result.spec.eval_id)
                recent = float(np.mean(history["returns"][-100:])) if len(history["returns"]) else None
                finals.append(mean)
                emit(
                    benchmark="quality",
                    algo="ppo",
                    env="ant",
                    seed=seed,
                    steps=result.steps,
                    eval_return=round(mean, 2),
                    final_training_return=None if recent is None else round(recent, 2),
                    train_seconds=round(result.train_seconds, 2),
                    compile_seconds=round(result.compile_seconds, 2),
                    env_steps_per_second=round(result.steps / result.train_seconds),
                    curve_csv=ant_csv,
                )
        emit(
            benchmark="quality",
            algo="ppo",
            env="ant",
            seeds=ant_seeds,
            steps=ant_steps,
            eval_returns=[round(e, 1) for e in finals],
            long_run_goal=">= 3000 (RLtools / rl_games)",
        )


#: issue 36's targets per discrete env: (median at least, worst at least or None)
DISCRETE_TARGETS = {"CartPole-v1": (475.0, 400.0), "Acrobot-v1": (-100.0, None), "MountainCar-v0": (-130.0, None)}
#: which algorithms issue 36 measures on each discrete env
DISCRETE_RUNS = {"CartPole-v1": ("ppo", "dqn"), "Acrobot-v1": ("dqn",), "MountainCar-v0": ("dqn",)}


def discrete(algos, seeds, envs, device=None):
    """Discrete action spaces (issue 36): each algorithm of ``algos`` that issue 36 measures on an
    env of ``envs``, with its default config and budget for that env, over ``seeds`` seeds."""
    device = device or drl.CPU()
    with _single_threaded_blas():
        for env in envs:
            for name in (a for a in algos if a in DISCRETE_RUNS.get(env, algos)):
                algo = getattr(drl, name)
                evals, seconds = [], []
                for seed in range(seeds):
                    result = algo.train(device, env, algo.config_for(env), seed=seed, progress=False)
                    mean, _ = evaluate(result.policy, result.spec.eval_id)
                    evals.append(mean)
                    seconds.append(result.train_seconds)
                    emit(
                        **where(name, env, device),
                        seed=seed,
                        steps=result.steps,
                        eval_return=round(mean, 2),
                        train_seconds=round(result.train_seconds, 3),
                        compile_seconds=round(result.compile_seconds, 2),
                    )
                median, worst = statistics.median(evals), min(evals)
                target_median, target_worst = DISCRETE_TARGETS.get(env, (None, None))
                meets = None
                if target_median is not None:
                    meets = bool(median >= target_median and (target_worst is None or worst >= target_worst))
                emit(
                    **where(name, env, device),
                    seeds=seeds,
                    steps=result.steps,
                    **returns_summary(evals),
                    median_train_seconds=round(statistics.median(seconds), 2),
                    target=None
                    if target_median is None
                    else f"median >= {target_median}"
                    + ("" if target_worst is None else f" and worst >= {target_worst}"),
                    meets_target=meets,
                )


FAMILIES = {"td3": off_policy, "sac": off_policy, "ppo": on_policy}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algos", default="td3,sac")
    parser.add_argument("--pendulum-seeds", type=int, default=10)
    parser.add_argument("--acrobot-seeds", type=int, default=5)
    parser.add_argument("--ppo-pendulum-seeds", type=int, default=5)
    parser.add_argument("--ppo-ant-seeds", type=int, default=2)
    parser.add_argument("--ppo-ant-steps", type=int, default=1_000_000)
    parser.add_argument("--discrete", default="", help="algorithms to measure on Discrete envs: ppo, dqn")
    parser.add_argument("--discrete-seeds", type=int, default=5)
    parser.add_argument("--discrete-envs", default=",".join(DISCRETE_TARGETS))
    parser.add_argument(
        "--keep-best",
        type=int,
        default=0,
        metavar="N",
        help="TD3/SAC: deploy the best of evaluations every N steps as the CLI's --keep-best (0: the final policy)",
    )
    parser.add_argument("--device", default="cpu", help="cpu, c or generic: the device Pendulum/Acrobot train on")
    parser.add_argument("--ppo-ant-csv", default="ppo_ant_curve.csv", help="Ant learning curve (every episode)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="TD3/SAC config override, e.g. prioritized=true (repeatable)",
    )
    args = parser.parse_args()
    algos = [a for a in args.algos.split(",") if a]
    unknown = sorted(set(algos) - set(FAMILIES))
    if unknown:
        parser.error(f"unknown algorithms {unknown}; choose from {sorted(FAMILIES)}")
    from dispatchrl.devices import device_from_name

    device = device_from_name(args.device)
    off = [a for a in algos if FAMILIES[a] is off_policy]
    if off:
        off_policy(off, args.pendulum_seeds, args.acrobot_seeds, args.set, device, args.keep_best)
    if "ppo" in algos:
        on_policy(["ppo"], args.ppo_pendulum_seeds, args.ppo_ant_seeds, args.ppo_ant_steps, args.ppo_ant_csv, device)
    if args.discrete:
        envs = [e for e in args.discrete_envs.split(",") if e]
        discrete([a for a in args.discrete.split(",") if a], args.discrete_seeds, envs, device)


if __name__ == "__main__":
    main()
