"""The MuJoCo locomotion suite (issue 38): Tianshou's table, and training speed against
Stable-Baselines3 and Tianshou in the same run.

    python benchmarks/mujoco.py --speed --peer-python /path/to/venv/bin/python
        [--algos sac,td3] [--peers sb3,tianshou] [--pairs 2] [--warmup 5000] [--learn 20000] [--seed 0]
    python benchmarks/mujoco.py --table [--algos sac,td3,ppo] [--envs halfcheetah,hopper,walker2d]
        [--seeds 0,1] [--steps N] [--eval-every N] [--xml walker2d.xml] [--results benchmarks/results/mujoco.jsonl]
    python benchmarks/mujoco.py --report [--results benchmarks/results/mujoco.jsonl]

``--speed`` (item 4): the throughput of the whole training loop on HalfCheetah-v5, SAC and TD3
with the same hyperparameters on every side (Tianshou's MuJoCo examples': 256 × 256 ReLU
networks, batch 256, one gradient step per env step, tau 0.005, gamma 0.99; SAC lr 1e-3 and a
temperature tuned from 0.2 at 3e-4; TD3 lr 3e-4, exploration noise 0.1, target noise 0.2 clipped
at 0.5, actor every 2 updates), ``--warmup`` steps of uniformly random actions then ``--learn``
learning steps, one env. dispatchrl runs in this process on the CPU device (its native
HalfCheetah; the compile seconds apart); each peer runs in a worker under ``--peer-python`` on
gymnasium's HalfCheetah-v5 with torch on the machine's cores as the library leaves it (the torch
thread count is reported). Pairs alternate the order of the sides. Steps per second = env steps
(warm-up included) / wall seconds of the training call (SB3 ``learn()``; Tianshou the random
warm-up collection plus ``run_training``; dispatchrl ``train_seconds``, compilation excluded).
JSON lines: "machine", one "speed" per side and pair, one "speed_summary" per algorithm and peer
with the median ratio of steps per second (dispatchrl / peer). Issue 38's target: >= 5x both.
What differs: SB3 tunes SAC's temperature at its learning rate (1e-3), not 3e-4; Tianshou 2's
``DummyVectorEnv`` with one env (its examples use ``ShmemVectorEnv`` subprocesses; one env gains
nothing from them). The peer venv: ``pip install stable-baselines3 tianshou mujoco`` (measured with
SB3 2.9.2, Tianshou 2.0.1, mujoco 4.0.0, torch 2.14, gymnasium 1.4; ``--peers sb3`` without Tianshou).

``--table`` (item 3): per algorithm, env and seed, train with the env's default configuration
(``config_for``: Tianshou's MuJoCo SAC/TD3/PPO, 3M steps for PPO), or ``--steps`` env steps (the
warm-up then capped at half of them; PPO needs at least one 2048-step rollout), evaluating the deterministic policy every ``--eval-every`` env steps
(default: Tianshou's epoch, 5000 off-policy, 30000 PPO) and at the end over 10 episodes
(``EvalCallback``, the fixed evaluation seeds). Each finished run appends a JSON line to
``--results``: the final and the max evaluation mean, every evaluation, the wall and compile
seconds, the configuration. ``--report`` prints the markdown table from that file: per algorithm
and env, the seeds, the mean ± std over seeds of the max and of the final evaluation, Tianshou's
figure beside them (Tianshou's paper, Table 2: the max average return over 10 seeds, SAC/TD3 at
1M steps, PPO at 3M, gym v3 envs; their evaluation averages 10 test episodes per epoch). Where
this differs from Tianshou: v5 envs, our deterministic evaluation, fewer seeds. ``--xml`` trains
and evaluates on another model file of gymnasium's assets (``walker2d.xml``: v3's and v4's
Walker2d, whose right foot has friction 0.9 where v5's has 1.9); its runs record ``xml_file`` and
report as rows of their own.
"""

import argparse
import dataclasses
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

# run as a script, this folder is sys.path[0], where this file would shadow the mujoco package that
# dispatchrl's envs import: drop it, and load step_breakdown by its path
HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]

import numpy as np  # noqa: E402

import dispatchrl as drl  # noqa: E402
from dispatchrl.envs.registry import MUJOCO_ENVS  # noqa: E402
from dispatchrl.training import EVAL_SEEDS, EvalCallback  # noqa: E402


def machine() -> dict:
    """step_breakdown.machine(): the CPU, cores and library versions."""
    spec = importlib.util.spec_from_file_location("step_breakdown", HERE / "step_breakdown.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.machine()


SPEED_ENV = "halfcheetah"
RESULTS = HERE / "results" / "mujoco.jsonl"

#: Tianshou's paper (seed 001, Table 2): (mean, std over 10 seeds) of the max average return;
#: SAC and TD3 at 1M env steps, PPO at 3M
TIANSHOU = {
    ("sac", "halfcheetah"): (12138.8, 1049.3),
    ("sac", "hopper"): (3542.2, 51.5),
    ("sac", "walker2d"): (5007.0, 251.5),
    ("td3", "halfcheetah"): (10201.2, 772.8),
    ("td3", "hopper"): (3472.2, 116.8),
    ("td3", "walker2d"): (3982.4, 274.5),
    ("ppo", "halfcheetah"): (7337.4, 1508.2),
    ("ppo", "hopper"): (3127.7, 413.0),
    ("ppo", "walker2d"): (4895.6, 704.3),
}
#: Tianshou's budgets for those figures
TIANSHOU_STEPS = {"sac": 1_000_000, "td3": 1_000_000, "ppo": 3_000_000}
#: Tianshou's evaluation interval (one epoch): off-policy 5000 steps, PPO 30000
EVAL_EVERY = {"sac": 5000, "td3": 5000, "ppo": 30000}
#: each env's own model file, read before ``--xml`` changes it
MUJOCO_XML = {env: batch.XML_FILE for env, (batch, _) in MUJOCO_ENVS.items()}

PEER = textwrap.dedent(
    """
    import json, math, sys, time
    import numpy as np, torch, gymnasium

    peer, algo, seed, warmup, learn = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    ENV = "HalfCheetah-v5"
    total = warmup + learn

    if peer == "sb3":
        import stable_baselines3
        from stable_baselines3 import SAC, TD3
        from stable_baselines3.common.noise import NormalActionNoise

        env = gymnasium.make(ENV)
        common = dict(buffer_size=total, learning_starts=warmup, batch_size=256, tau=0.005, gamma=0.99,
                      train_freq=1, gradient_steps=1, policy_kwargs=dict(net_arch=[256, 256]), seed=seed,
                      device="cpu")
        if algo == "sac":
            model = SAC("MlpPolicy", env, learning_rate=1e-3, ent_coef="auto_0.2", **common)
        else:
            n = env.action_space.shape[0]
            model = TD3("MlpPolicy", env, learning_rate=3e-4, policy_delay=2, target_policy_noise=0.2,
                        target_noise_clip=0.5, action_noise=NormalActionNoise(np.zeros(n), 0.1 * np.ones(n)),
                        **common)
        start = time.perf_counter()
        model.learn(total)
        seconds = time.perf_counter() - start
        steps, version = model.num_timesteps, stable_baselines3.__version__
    else:
        import tianshou
        from tianshou.algorithm import SAC, TD3
        from tianshou.algorithm.modelfree.ddpg import ContinuousDeterministicPolicy
        from tianshou.algorithm.modelfree.sac import AutoAlpha, SACPolicy
        from tianshou.algorithm.optim import AdamOptimizerFactory
        from tianshou.data import Collector, CollectStats, ReplayBuffer
        from tianshou.env import DummyVectorEnv
        from tianshou.exploration import GaussianNoise
        from tianshou.trainer import OffPolicyTrainerParams
        from tianshou.utils.net.common import Net
        from tianshou.utils.net.continuous import (ContinuousActorDeterministic, ContinuousActorProbabilistic,
                                                   ContinuousCritic)

        env = gymnasium.make(ENV)
        train_envs = DummyVectorEnv([lambda: gymnasium.make(ENV)])
        train_envs.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        obs_shape, act_shape = env.observation_space.shape, env.action_space.shape
        hidden = [256, 256]

        def critic():
            net = Net(state_shape=obs_shape, action_shape=act_shape, hidden_sizes=hidden, concat=True)
            return ContinuousCritic(preprocess_net=net)

        if algo == "sac":  # examples/mujoco/mujoco_sac.py, with --auto-alpha
            actor = ContinuousActorProbabilistic(preprocess_net=Net(state_shape=obs_shape, hidden_sizes=hidden),
                                                 action_shape=act_shape, unbounded=True, conditioned_sigma=True)
            policy = SACPolicy(actor=actor, action_space=env.action_space)
            alpha = AutoAlpha(target_entropy=-float(np.prod(act_shape)), log_alpha=math.log(0.2),
                              optim=AdamOptimizerFactory(lr=3e-4))
            algorithm = SAC(policy=policy, policy_optim=AdamOptimizerFactory(lr=1e-3), critic=critic(),
                            critic_optim=AdamOptimizerFactory(lr=1e-3), critic2=critic(),
                            critic2_optim=AdamOptimizerFactory(lr=1e-3), tau=0.005, gamma=0.99, alpha=alpha)
        else:  # examples/mujoco/mujoco_td3.py
            max_action = float(env.action_space.high[0])
            actor = ContinuousActorDeterministic(preprocess_net=Net(state_shape=obs_shape, hidden_sizes=hidden),
                                                 action_shape=act_shape, max_action=max_action)
            policy = ContinuousDeterministicPolicy(actor=actor, action_space=env.action_space,
                                                   exploration_noise=GaussianNoise(sigma=0.1 * max_action))
            algorithm = TD3(policy=policy, policy_optim=AdamOptimizerFactory(lr=3e-4), critic=critic(),
                            critic_optim=AdamOptimizerFactory(lr=3e-4), critic2=critic(),
                            critic2_optim=AdamOptimizerFactory(lr=3e-4), tau=0.005, gamma=0.99,
                            policy_noise=0.2 * max_action, update_actor_freq=2, noise_clip=0.5 * max_action)
        collector = Collector[CollectStats](algorithm, train_envs, ReplayBuffer(total), exploration_noise=True)
        start = time.perf_counter()
        collector.reset()
        collector.collect(n_step=warmup, random=True)
        algorithm.run_training(OffPolicyTrainerParams(
            training_collector=collector, test_collector=None, max_epochs=1, epoch_num_steps=learn,
            collection_step_num_env_steps=1, update_step_num_gradient_steps_per_sample=1.0, batch_size=256,
            test_in_training=False, verbose=False, show_progress=False))
        seconds = time.perf_counter() - start
        steps, version = warmup + learn, tianshou.__version__

    print(json.dumps({"learn_seconds": seconds, "steps": int(steps), "torch_threads": torch.get_num_threads(),
                      "torch": torch.__version__, "version": version}))
    """
)

PEER_NAMES = {"sb3": "Stable-Baselines3", "tianshou": "Tianshou"}


def emit(**record) -> None:
    print(json.dumps(record), flush=True)


def run_peer(python: str, peer: str, algo: str, seed: int, warmup: int, learn: int) -> dict:
    done = subprocess.run(
        [python, "-c", PEER, peer, algo, str(seed), str(warmup), str(learn)], capture_output=True, text=True
    )
    if done.returncode:
        raise SystemExit(f"{PEER_NAMES[peer]} worker failed:\n{done.stderr[-3000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["steps_per_second"] = out["steps"] / out["learn_seconds"]
    return out


def speed_config(algo_name: str, warmup: int, learn: int):
    """The env's MuJoCo configuration (Tianshou's) with the benchmark's budget and warm-up."""
    cfg = getattr(drl, algo_name).config_for(SPEED_ENV)
    return dataclasses.replace(cfg, total_steps=warmup + learn, warmup_steps=warmup)


def run_ours(algo_name: str, seed: int, warmup: int, learn: int, threads: int | None = None) -> dict:
    """dispatchrl's side, on ``threads`` learner threads (None: as DISPATCHRL_LEARNER_THREADS says)."""
    import numba

    from dispatchrl.kernels.core import cpu_gemm
    from dispatchrl.kernels.core.cpu_gemm_threads import learner_threads

    if threads is not None:
        os.environ["DISPATCHRL_LEARNER_THREADS"] = str(threads)
        cpu_gemm.load_drivers()  # starts or stops the workers now (a cached step stages nothing)

    result = getattr(drl, algo_name).train(
        drl.CPU(), SPEED_ENV, speed_config(algo_name, warmup, learn), seed=seed, progress=False
    )
    return {
        "train_seconds": result.train_seconds,
        "compile_seconds": result.compile_seconds,
        "steps": result.steps,
        "steps_per_second": result.steps / result.train_seconds,
        "numba_threads": numba.get_num_threads(),
        "learner_threads": learner_threads(),  # DISPATCHRL_LEARNER_THREADS: the products' threads
    }


def speed(args) -> None:
    peers = [p for p in args.peers.split(",") if p]
    for peer in peers:
        if peer not in PEER_NAMES:
            raise SystemExit(f"--peers: expected names from {sorted(PEER_NAMES)}, got {peer!r}")
    for algo in [a for a in args.algos.split(",") if a]:
        if algo not in ("sac", "td3"):
            raise SystemExit(f"--speed --algos: expected sac and/or td3, got {algo!r}")
        ours = {f"dispatchrl-{t}t": int(t) for t in args.learner_threads.split(",")} if args.learner_threads else {}
        ours = ours or {"dispatchrl": None}
        rates: dict[str, list[float]] = {side: [] for side in [*ours, *peers]}
        for pair in range(args.pairs):
            seed = args.seed + pair
            order = [*ours, *peers] if pair % 2 == 0 else [*peers, *ours]
            for side in order:
                load = os.getloadavg()[0]
                if side in ours:
                    run = run_ours(algo, seed, args.warmup, args.learn, ours[side])
                else:
                    run = run_peer(args.peer_python, side, algo, seed, args.warmup, args.learn)
                rates[side].append(run["steps_per_second"])
                emit(
                    record="speed",
                    side=side,
                    algo=algo,
                    env="HalfCheetah-v5",
                    seed=seed,
                    pair=pair,
                    warmup=args.warmup,
                    learn=args.learn,
                    load_before=round(load, 2),
                    **{k: round(v, 4) if isinstance(v, float) else v for k, v in run.items()},
                )
        for side, peer in [(side, peer) for side in ours for peer in peers]:
            ratios = [a / b for a, b in zip(rates[side], rates[peer], strict=True)]
            median = statistics.median(ratios)
            emit(
                record="speed_summary",
                algo=algo,
                side=side,
                peer=peer,
                pairs=args.pairs,
                warmup=args.warmup,
                learn=args.learn,
                median_steps_per_second={
                    side: round(statistics.median(rates[side]), 1),
                    peer: round(statistics.median(rates[peer]), 1),
                },
                median_speedup=round(median, 3),  # dispatchrl steps/s ÷ the peer's
                median_time_ratio=round(1 / median, 4),  # dispatchrl seconds ÷ the peer's
                speedups=[round(r, 3) for r in ratios],
                target=">= 5x",
                meets_target=median >= 5,
                loadavg_after=list(os.getloadavg()),
            )


def table_config(algo_name: str, env: str, steps: int | None, overrides: list[str] = ()):
    from dispatchrl.cli import _parse_overrides

    cfg = _parse_overrides(getattr(drl, algo_name).config_for(env), list(overrides))
    if steps is None:
        return cfg
    changes: dict = {"total_steps": steps}
    if hasattr(cfg, "warmup_steps") and cfg.warmup_steps > steps // 2:
        changes["warmup_steps"] = steps // 2  # a short run still learns in its second half
    return dataclasses.replace(cfg, **changes)


def table(args) -> None:
    if args.xml and len([e for e in args.envs.split(",") if e]) != 1:
        raise SystemExit(f"--xml {args.xml} is one env's model: give one env in --envs, got {args.envs!r}")
    results = Path(args.results)
    results.parent.mkdir(parents=True, exist_ok=True)
    for algo in [a for a in args.algos.split(",") if a]:
        for env in [e for e in args.envs.split(",") if e]:
            if (algo, env) not in TIANSHOU:
                raise SystemExit(f"--table: no Tianshou figure for {algo} on {env}; expected {sorted(TIANSHOU)}")
            batch = MUJOCO_ENVS[env][0]
            if args.xml:  # the class attribute: training's batch and the evaluation env both read it
                batch.XML_FILE = args.xml
            for seed in [int(s) for s in args.seeds.split(",") if s]:
                cfg = table_config(algo, env, args.steps, args.set)
                every = min(args.eval_every or EVAL_EVERY[algo], cfg.total_steps)
                evaluations = EvalCallback(every, episodes=len(EVAL_SEEDS))
                load = os.getloadavg()[0]
                start = time.perf_counter()
                result = getattr(drl, algo).train(drl.CPU(), env, cfg, seed=seed, progress=False, hooks=[evaluations])
                wall = time.perf_counter() - start
                means = [row["eval_return"] for row in evaluations.rows]
                record = dict(
                    record="table_run",
                    algo=algo,
                    env=env,
                    seed=seed,
                    steps=result.steps,
                    final_return=round(float(means[-1]), 2),
                    max_return=round(float(np.max(means)), 2),
                    evaluations=[[row["steps"], round(float(row["eval_return"]), 2)] for row in evaluations.rows],
                    eval_every=every,
                    eval_episodes=len(EVAL_SEEDS),
                    train_seconds=round(result.train_seconds, 2),
                    compile_seconds=round(result.compile_seconds, 2),
                    wall_seconds=round(wall, 2),
                    load_before=round(load, 2),
                    config=dataclasses.asdict(cfg),
                    xml_file=batch.XML_FILE,
                    machine=machine(),
                    when=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                )
                with results.open("a") as f:
                    f.write(json.dumps(record) + "\n")
                emit(**record)
    report(results)


def _settings(run: dict) -> str:
    """How a run's config differs from its env's default today, budget apart ("default" if not):
    rows of other settings, or of an older default, are not pooled with today's."""
    config = getattr(drl, run["algo"]).config_for(run["env"])
    default = json.loads(json.dumps(dataclasses.asdict(config)))
    # a field a run's record lacks is newer than the run, which had the field's class default
    then = {
        f.name: json.loads(json.dumps(None if f.default is dataclasses.MISSING else f.default))
        for f in dataclasses.fields(config)
    }
    recorded = {key: run["config"].get(key, then[key]) for key in default}
    differs = [
        f"{key}={recorded[key]}"
        for key, value in default.items()
        if key not in ("total_steps", "warmup_steps") and recorded[key] != value
    ]
    xml_file = run.get("xml_file", MUJOCO_XML[run["env"]])  # runs before --xml had the env's own
    if xml_file != MUJOCO_XML[run["env"]]:
        differs.append(f"xml_file={xml_file}")
    return ", ".join(differs) or "default"


def _mean_std(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{statistics.fmean(values):.1f} ± {statistics.stdev(values):.1f}"


def report(results: Path) -> None:
    """The markdown table of the finished runs in ``results``, Tianshou's figure beside each row."""
    runs = []
    if results.exists():
        runs = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
    groups: dict[tuple[str, str, int, str], list[dict]] = {}
    for run in runs:
        groups.setdefault((run["algo"], run["env"], run["steps"], _settings(run)), []).append(run)
    print(f"Finished runs from {results}: {len(runs)}\n")
    print(
        "| algo | env | steps | config | seeds | max eval (mean ± std) | final eval | Tianshou (max) | wall s / run |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for (algo, env, steps, settings), group in sorted(groups.items()):
        mean, std = TIANSHOU.get((algo, env), (None, None))
        theirs = "" if mean is None else f"{mean:.1f}" + ("" if std is None else f" ± {std:.1f}")
        theirs += f" ({TIANSHOU_STEPS[algo] // 1000}k)" if mean is not None else ""
        print(
            f"| {algo} | {env} | {steps} | {settings} | {len(group)} | {_mean_std([r['max_return'] for r in group])} "
            f"| {_mean_std([r['final_return'] for r in group])} | {theirs} "
            f"| {statistics.fmean(r['wall_seconds'] for r in group):.0f} |"
        )
    for algo, env in sorted(set(TIANSHOU) - {(algo, env) for algo, env, _, _ in groups}):
        mean, std = TIANSHOU[algo, env]
        theirs = f"{mean:.1f}" + ("" if std is None else f" ± {std:.1f}") + f" ({TIANSHOU_STEPS[algo] // 1000}k)"
        print(f"| {algo} | {env} | | | 0 | | | {theirs} | |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--speed", action="store_true", help="training-loop throughput against SB3 and Tianshou")
    mode.add_argument("--table", action="store_true", help="train and evaluate the table's runs")
    mode.add_argument("--report", action="store_true", help="print the markdown table from --results")
    parser.add_argument("--peer-python", help="--speed: a Python with stable-baselines3, tianshou, mujoco, torch")
    parser.add_argument("--peers", default="sb3,tianshou", help="--speed: the peers (sb3, tianshou)")
    parser.add_argument("--algos", default=None, help="default: sac,td3 (--speed), sac,td3,ppo (--table)")
    parser.add_argument("--pairs", type=int, default=2, help="--speed: alternating-order rounds per algorithm")
    parser.add_argument("--warmup", type=int, default=5000, help="--speed: steps of random actions first")
    parser.add_argument("--learn", type=int, default=20000, help="--speed: learning steps after the warm-up")
    parser.add_argument("--seed", type=int, default=0, help="--speed: the first pair's seed")
    parser.add_argument(
        "--learner-threads", default="", help="--speed: dispatchrl once per count, e.g. 1,2 (default: as set)"
    )
    parser.add_argument("--envs", default="halfcheetah,hopper,walker2d", help="--table: MuJoCo envs, short names")
    parser.add_argument("--seeds", default="0,1", help="--table: seeds, comma-separated")
    parser.add_argument("--steps", type=int, default=None, help="--table: env steps (default: the config's)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="--table: a config field over the env's default (repeatable; the record keeps the whole config)",
    )
    parser.add_argument("--eval-every", type=int, default=None, help="--table: env steps between evaluations")
    parser.add_argument(
        "--xml", default=None, help="--table: a model file of gymnasium's assets (walker2d.xml: v3/v4's)"
    )
    parser.add_argument("--results", default=str(RESULTS), help="--table/--report: the JSON-lines file")
    args = parser.parse_args()
    if args.report:
        report(Path(args.results))
        return
    emit(record="machine", loadavg=list(os.getloadavg()), **machine())
    if args.speed:
        if not args.peer_python:
            raise SystemExit("--speed needs --peer-python (a Python with stable-baselines3, tianshou and mujoco)")
        args.algos = args.algos or "sac,td3"
        speed(args)
    else:
        args.algos = args.algos or "sac,td3,ppo"
        table(args)


if __name__ == "__main__":
    main()
