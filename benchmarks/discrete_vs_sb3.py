"""Discrete actions against Stable-Baselines3 in the same run (issue 36): PPO and DQN on
CartPole-v1, each side with its default budget and the rl-zoo hyperparameters.

    python benchmarks/discrete_vs_sb3.py --peer-python /path/to/venv-with-sb3/bin/python
        [--algos ppo,dqn] [--pairs 1] [--seed 0]

Each pair runs Stable-Baselines3 (in a worker under ``--peer-python``, torch on one thread) and
dispatchrl (CPU device, this process), alternating which goes first; both sides are then evaluated
deterministically over the same 10 episode seeds. Prints JSON lines: "machine", one "run" per
side and pair (wall seconds of ``learn()`` / of training without compilation, the compile seconds
apart, the evaluation), and one "summary" per algorithm with the median time ratio
(dispatchrl / SB3) over the pairs. Issue 36's target: a ratio <= 1/30.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap

import dispatchrl as drl
from dispatchrl.training import EVAL_SEEDS, evaluate

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

    def linear(value):
        return lambda remaining: remaining * value

    if algo == "ppo":
        env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
        model = PPO("MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
                    ent_coef=0.0, learning_rate=linear(1e-3), clip_range=linear(0.2), seed=seed, device="cpu")
        budget = 100_000
    else:
        env = gymnasium.make("CartPole-v1")
        model = DQN("MlpPolicy", env, learning_rate=2.3e-3, batch_size=64, buffer_size=100_000,
                    learning_starts=1000, gamma=0.99, target_update_interval=10, train_freq=256,
                    gradient_steps=128, exploration_fraction=0.16, exploration_final_eps=0.04,
                    policy_kwargs=dict(net_arch=[256, 256]), seed=seed, device="cpu")
        budget = 50_000
    start = time.perf_counter()
    model.learn(budget)
    seconds = time.perf_counter() - start
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
    print(json.dumps({"learn_seconds": seconds, "steps": budget, "eval_returns": returns}))
    """
)


def emit(**record) -> None:
    print(json.dumps(record), flush=True)


def run_peer(python: str, algo: str, seed: int) -> dict:
    done = subprocess.run(
        [python, "-c", PEER, algo, str(seed), json.dumps(list(EVAL_SEEDS))],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"},
    )
    if done.returncode:
        raise SystemExit(f"Stable-Baselines3 worker failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_ours(algo_name: str, seed: int) -> dict:
    algo = getattr(drl, algo_name)
    result = algo.train(drl.CPU(), ENV, algo.config_for(ENV), seed=seed, progress=False)
    mean, returns = evaluate(result.policy, result.spec.eval_id)
    return {
        "train_seconds": result.train_seconds,
        "compile_seconds": result.compile_seconds,
        "steps": result.steps,
        "eval_return": mean,
        "eval_returns": [float(r) for r in returns],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peer-python", required=True, help="a Python with stable-baselines3 and torch")
    parser.add_argument("--algos", default="ppo,dqn")
    parser.add_argument("--pairs", type=int, default=1, help="alternating (SB3, dispatchrl) pairs per algorithm")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    emit(record="machine", loadavg=list(os.getloadavg()), **machine())
    for algo in [a for a in args.algos.split(",") if a]:
        ratios = []
        for pair in range(args.pairs):
            seed = args.seed + pair
            order = ("sb3", "dispatchrl") if pair % 2 == 0 else ("dispatchrl", "sb3")
            runs = {}
            for side in order:
                load = os.getloadavg()[0]
                runs[side] = run_peer(args.peer_python, algo, seed) if side == "sb3" else run_ours(algo, seed)
                if side == "sb3":
                    runs[side]["eval_return"] = statistics.fmean(runs[side]["eval_returns"])
                emit(record="run", side=side, algo=algo, env=ENV, seed=seed, load_before=round(load, 2), **runs[side])
            ratios.append(runs["dispatchrl"]["train_seconds"] / runs["sb3"]["learn_seconds"])
        emit(
            record="summary",
            algo=algo,
            env=ENV,
            pairs=args.pairs,
            median_time_ratio=round(statistics.median(ratios), 4),
            ratios=[round(r, 4) for r in ratios],
            target="<= 1/30 (0.0333)",
            meets_target=statistics.median(ratios) <= 1 / 30,
            loadavg_after=list(os.getloadavg()),
        )


if __name__ == "__main__":
    main()
