"""Discrete actions against Stable-Baselines3 in the same run (issue 36): PPO and DQN on
CartPole-v1, each side with its default budget and the rl-zoo hyperparameters.

    python benchmarks/discrete_vs_sb3.py --peer-python /path/to/venv-with-sb3/bin/python
        [--algos ppo,dqn] [--pairs 1] [--seed 0] [--dqn-config rlzoo|cleanrl]
        [--time-to 475 [--eval-every 2048]]

Each pair runs Stable-Baselines3 (in a worker under ``--peer-python``, torch on one thread) and
dispatchrl (CPU device, this process), alternating which goes first; both sides are then evaluated
deterministically over the same 10 episode seeds. Prints JSON lines: "machine", one "run" per
side and pair (wall seconds of ``learn()`` / of training without compilation, the compile seconds
apart, the evaluation), and one "summary" per algorithm with the median time ratio
(dispatchrl / SB3) over the pairs. Issue 36's target: a ratio <= 1/30.

``--time-to R``: instead of the whole budget, each side evaluates its deterministic policy every
``--eval-every`` env steps (rounded down to a whole number of the algorithm's iterations: PPO's
8 × 32 rollout, DQN's ``train_freq``; the same steps on both sides) and at the end of the budget,
on the same 10 CartPole-v1 episodes (the fixed evaluation seeds), and stops at the first mean
return >= R. Each "time_to" record gives the training seconds to get there with the seconds
spent inside the evaluations subtracted (dispatchrl: an ``EvalCallback`` subclass that times
itself, with ``StopOnReward``; SB3: a callback evaluating at the start of a rollout, i.e. after
the previous update, as dispatchrl's hooks run after an iteration's update), the env steps then,
and whether it got there within the default budget. dispatchrl's compile seconds are apart.
Issue 36's target: DQN at 475 within 2 s of training on 2 cores.

``--dqn-config cleanrl``: CleanRL's ``dqn.py`` defaults for CartPole-v1 on both sides instead of
the rl-zoo's: 500k steps, Adam lr 2.5e-4, buffer 10,000, γ 0.99, tau 1 every 500 steps, batch
128, ε 1 → 0.05 over half the run, learning starts at 10,000, one gradient step every 10 env
steps, a 120 × 84 ReLU network, plain (not double) DQN targets, no gradient clip (SB3's
``max_grad_norm`` set to infinity). What stays different from CleanRL: the loss (CleanRL's MSE;
SB3 and dispatchrl have the Huber loss and no option for another), acting before
``learning_starts`` (CleanRL ε-greedy on the schedule, ε ≈ 0.96 at 10k; SB3 and dispatchrl
uniformly random), and each library's own weight initialisation. All three bootstrap through
time-limit truncations.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap
import time

import dispatchrl as drl
from dispatchrl.training import EVAL_SEEDS, EvalCallback, StopOnReward, evaluate

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from step_breakdown import machine

ENV = "CartPole-v1"

#: the rl-zoo's CartPole-v1 hyperparameters (rl-baselines3-zoo hyperparams/ppo.yml and dqn.yml)
PEER = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np, torch, gymnasium
    from stable_baselines3 import DQN, PPO
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(1)
    algo, seed, eval_seeds = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    options = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
    time_to, eval_every = options.get("time_to"), options.get("eval_every")

    def linear(value):
        return lambda remaining: remaining * value

    if algo == "ppo":
        env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
        model = PPO("MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
                    ent_coef=0.0, learning_rate=linear(1e-3), clip_range=linear(0.2), seed=seed, device="cpu")
        budget = 100_000
    elif options.get("dqn_config") == "cleanrl":  # CleanRL dqn.py's defaults (see the module's docstring)
        env = gymnasium.make("CartPole-v1")
        model = DQN("MlpPolicy", env, learning_rate=2.5e-4, batch_size=128, buffer_size=10_000,
                    learning_starts=10_000, gamma=0.99, tau=1.0, target_update_interval=500, train_freq=10,
                    gradient_steps=1, exploration_fraction=0.5, exploration_initial_eps=1.0,
                    exploration_final_eps=0.05, max_grad_norm=float("inf"),
                    policy_kwargs=dict(net_arch=[120, 84]), seed=seed, device="cpu")
        budget = 500_000
    else:
        env = gymnasium.make("CartPole-v1")
        model = DQN("MlpPolicy", env, learning_rate=2.3e-3, batch_size=64, buffer_size=100_000,
                    learning_starts=1000, gamma=0.99, target_update_interval=10, train_freq=256,
                    gradient_steps=128, exploration_fraction=0.16, exploration_final_eps=0.04,
                    policy_kwargs=dict(net_arch=[256, 256]), seed=seed, device="cpu")
        budget = 50_000

    def evaluate():
        returns = []
        for episode_seed in eval_seeds:
            e = gymnasium.make("CartPole-v1")
            obs, _ = e.reset(seed=episode_seed)
            total, done = 0.0, False
            while not done:
                action, _ = model.predict(obs, deterministic=True)
                obs, reward, terminated, truncated, _ = e.step(action)
                total += float(reward)
                done = terminated or truncated
            returns.append(total)
        return returns

    if time_to is None:
        start = time.perf_counter()
        model.learn(budget)
        seconds = time.perf_counter() - start
        print(json.dumps({"learn_seconds": seconds, "steps": budget, "eval_returns": evaluate()}))
        sys.exit()

    from stable_baselines3.common.callbacks import BaseCallback

    class TimeTo(BaseCallback):
        # evaluates at a rollout's start (after the previous update) once eval_every more steps are
        # done, timing itself; on_rollout_start's answer is ignored, so the next step stops the run
        def __init__(self):
            super().__init__()
            self.next_eval, self.eval_seconds, self.evaluations, self.reached_at = eval_every, 0.0, [], None

        def evaluate_now(self):
            start = time.perf_counter()
            mean = float(np.mean(evaluate()))
            self.eval_seconds += time.perf_counter() - start
            self.evaluations.append([self.model.num_timesteps, mean])
            if mean >= time_to and self.reached_at is None:
                self.reached_at = self.model.num_timesteps

        def _on_rollout_start(self):
            if self.reached_at is None and self.model.num_timesteps >= self.next_eval:
                while self.next_eval <= self.model.num_timesteps:
                    self.next_eval += eval_every
                self.evaluate_now()

        def _on_step(self):
            return self.reached_at is None

    callback = TimeTo()
    start = time.perf_counter()
    model.learn(budget, callback=callback)
    seconds = time.perf_counter() - start
    if callback.reached_at is None and (not callback.evaluations or callback.evaluations[-1][0] < budget):
        callback.evaluate_now()  # at the end of the budget, as dispatchrl's EvalCallback (not in the time)
    print(json.dumps({"learn_seconds": seconds, "eval_seconds": callback.eval_seconds,
                      "reached_at": callback.reached_at, "budget": budget, "evaluations": callback.evaluations}))
    """
)


def emit(**record) -> None:
    print(json.dumps(record), flush=True)


def run_peer(python: str, algo: str, seed: int, options: dict | None = None) -> dict:
    done = subprocess.run(
        [
            python,
            "-c",
            PEER,
            algo,
            str(seed),
            json.dumps(list(EVAL_SEEDS)),
            *([json.dumps(options)] if options else []),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"},
    )
    if done.returncode:
        raise SystemExit(f"Stable-Baselines3 worker failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


#: CleanRL dqn.py's CartPole-v1 defaults as dispatchrl's fields (what has no counterpart: the docstring)
CLEANRL_DQN = dict(
    total_steps=500_000,
    learning_rate=2.5e-4,
    buffer_size=10_000,
    gamma=0.99,
    tau=1.0,
    target_update_interval=500,
    batch_size=128,
    exploration_initial_eps=1.0,
    exploration_final_eps=0.05,
    exploration_fraction=0.5,
    learning_starts=10_000,
    train_freq=10,
    gradient_steps=1,
    double_q=False,
    hidden=(120, 84),
    activation="relu",
)
#: what the CleanRL configuration cannot match, on SB3's and dispatchrl's side alike
CLEANRL_UNMATCHED = [
    "loss: CleanRL MSE, SB3 and dispatchrl Huber (no option for another)",
    "before learning_starts: CleanRL epsilon-greedy on the schedule, SB3 and dispatchrl uniformly random",
    "weight initialisation: each library's own",
]


def config(algo_name: str, dqn_config: str):
    algo = getattr(drl, algo_name)
    if algo_name == "dqn" and dqn_config == "cleanrl":
        return drl.dqn.Config(**CLEANRL_DQN)
    return algo.config_for(ENV)


class TimedEval(EvalCallback):
    """An EvalCallback that sums the seconds spent in it, to take them off the training time."""

    seconds = 0.0

    def __call__(self, run) -> None:
        start = time.perf_counter()
        super().__call__(run)
        self.seconds += time.perf_counter() - start


def iteration_steps(algo_name: str, dqn_config: str) -> int:
    """Env steps of one iteration (evaluations fall between iterations)."""
    cfg = config(algo_name, dqn_config)
    return getattr(drl, algo_name).schedule(cfg).env_steps * cfg.num_envs


def time_to_ours(algo_name: str, seed: int, threshold: float, every: int, dqn_config: str) -> dict:
    algo = getattr(drl, algo_name)
    evaluations = TimedEval(every, episodes=len(EVAL_SEEDS))
    stop = StopOnReward(threshold, evaluations)
    cfg = config(algo_name, dqn_config)
    result = algo.train(drl.CPU(), ENV, cfg, seed=seed, progress=False, hooks=[evaluations, stop])
    return {
        "reached": stop.stopped_at is not None,
        "steps_to_threshold": stop.stopped_at,
        "train_seconds": result.train_seconds - evaluations.seconds,
        "eval_seconds": evaluations.seconds,
        "compile_seconds": result.compile_seconds,
        "budget": cfg.total_steps,
        "evaluations": [[row["steps"], row["eval_return"]] for row in evaluations.rows],
    }


def time_to_peer(python: str, algo: str, seed: int, threshold: float, every: int, dqn_config: str) -> dict:
    out = run_peer(python, algo, seed, {"time_to": threshold, "eval_every": every, "dqn_config": dqn_config})
    return {
        "reached": out["reached_at"] is not None,
        "steps_to_threshold": out["reached_at"],
        "train_seconds": out["learn_seconds"] - out["eval_seconds"],
        "eval_seconds": out["eval_seconds"],
        "budget": out["budget"],
        "evaluations": out["evaluations"],
    }


def run_ours(algo_name: str, seed: int, dqn_config: str = "rlzoo") -> dict:
    algo = getattr(drl, algo_name)
    result = algo.train(drl.CPU(), ENV, config(algo_name, dqn_config), seed=seed, progress=False)
    mean, returns = evaluate(result.policy, result.spec.eval_id)
    return {
        "train_seconds": result.train_seconds,
        "compile_seconds": result.compile_seconds,
        "steps": result.steps,
        "eval_return": mean,
        "eval_returns": [float(r) for r in returns],
    }


def pairs(args):
    """(seed, the sides in the order they run) per pair: seeds from --seed on, SB3 first in even
    pairs and dispatchrl first in odd ones."""
    for pair in range(args.pairs):
        yield args.seed + pair, ("sb3", "dispatchrl") if pair % 2 == 0 else ("dispatchrl", "sb3")


def run_pairs(args, record: str, algo: str, tag: dict, run_side, **fields):
    """Runs the pairs of :func:`pairs`, each side as ``run_side(side, seed)``, and emits a
    ``record`` line per run (``fields`` before the load before it, then the run's own keys);
    yields each pair's runs by side."""
    for seed, order in pairs(args):
        runs = {}
        for side in order:
            load = os.getloadavg()[0]
            runs[side] = run_side(side, seed)
            emit(
                record=record,
                side=side,
                algo=algo,
                env=ENV,
                seed=seed,
                **tag,
                **fields,
                load_before=round(load, 2),
                **runs[side],
            )
        yield runs


def time_to(args, algo: str) -> None:
    """The ``--time-to`` mode for ``algo``: "time_to" records per side and pair, then a summary."""
    dqn_config = args.dqn_config if algo == "dqn" else "rlzoo"
    unit = iteration_steps(algo, dqn_config)
    every = max(unit, args.eval_every // unit * unit)
    tag = {"dqn_config": dqn_config} if algo == "dqn" else {}
    seconds: dict[str, list] = {"sb3": [], "dispatchrl": []}
    steps: dict[str, list] = {"sb3": [], "dispatchrl": []}
    ratios = []

    def run_side(side: str, seed: int) -> dict:
        if side == "sb3":
            run = time_to_peer(args.peer_python, algo, seed, args.time_to, every, dqn_config)
        else:
            run = time_to_ours(algo, seed, args.time_to, every, dqn_config)
        run["seconds_exclude"] = "the seconds inside the evaluations (and, for dispatchrl, compilation)"
        return run

    fields = {"threshold": args.time_to, "eval_every": every, "eval_episodes": len(EVAL_SEEDS)}
    for runs in run_pairs(args, "time_to", algo, tag, run_side, **fields):
        for side, run in runs.items():
            seconds[side].append(run["train_seconds"])
            steps[side].append(run["steps_to_threshold"])
        if runs["sb3"]["reached"] and runs["dispatchrl"]["reached"]:
            ratios.append(runs["dispatchrl"]["train_seconds"] / runs["sb3"]["train_seconds"])
    emit(
        record="time_to_summary",
        algo=algo,
        env=ENV,
        **tag,
        threshold=args.time_to,
        eval_every=every,
        pairs=args.pairs,
        reached={side: sum(s is not None for s in steps[side]) for side in steps},
        median_train_seconds={side: round(statistics.median(v), 3) for side, v in seconds.items()},
        steps_to_threshold=steps,
        median_time_ratio=round(statistics.median(ratios), 4) if ratios else None,
        ratios=[round(r, 4) for r in ratios],
        target="ratio <= 1/30 (0.0333)" + ("; dispatchrl DQN at 475 within 2 s of training" if algo == "dqn" else ""),
        loadavg_after=list(os.getloadavg()),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peer-python", required=True, help="a Python with stable-baselines3 and torch")
    parser.add_argument("--algos", default="ppo,dqn")
    parser.add_argument("--pairs", type=int, default=1, help="alternating (SB3, dispatchrl) pairs per algorithm")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--dqn-config", choices=("rlzoo", "cleanrl"), default="rlzoo", help="DQN's hyperparameters, both sides"
    )
    parser.add_argument(
        "--time-to", type=float, default=None, metavar="RETURN", help="stop each side at the first evaluation >= this"
    )
    parser.add_argument(
        "--eval-every",
        type=int,
        default=2048,
        help="--time-to: env steps between evaluations (rounded down to whole iterations)",
    )
    args = parser.parse_args()
    emit(record="machine", loadavg=list(os.getloadavg()), **machine())
    for algo in [a for a in args.algos.split(",") if a]:
        if args.time_to is not None:
            time_to(args, algo)
            continue
        cleanrl = algo == "dqn" and args.dqn_config == "cleanrl"
        tag = {"dqn_config": "cleanrl"} if cleanrl else {}  # the rl-zoo records as they were

        def run_side(side: str, seed: int, algo: str = algo, tag: dict = tag) -> dict:
            if side == "dispatchrl":
                return run_ours(algo, seed, args.dqn_config)
            run = run_peer(args.peer_python, algo, seed, tag)
            run["eval_return"] = statistics.fmean(run["eval_returns"])
            return run

        ratios = [
            runs["dispatchrl"]["train_seconds"] / runs["sb3"]["learn_seconds"]
            for runs in run_pairs(args, "run", algo, tag, run_side)
        ]
        emit(
            record="summary",
            algo=algo,
            env=ENV,
            **tag,
            pairs=args.pairs,
            median_time_ratio=round(statistics.median(ratios), 4),
            ratios=[round(r, 4) for r in ratios],
            target="<= 1/30 (0.0333)",
            meets_target=statistics.median(ratios) <= 1 / 30,
            loadavg_after=list(os.getloadavg()),
            **({"unmatched": CLEANRL_UNMATCHED} if cleanrl else {}),
        )


if __name__ == "__main__":
    main()
