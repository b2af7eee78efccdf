"""Environment throughput against gymnasium, measured side by side in the same run.

- Pendulum-v1: dispatchrl's native batch (env_step + env_reset_done staged into one compiled CPU
  step, many steps per call, as a training loop runs it) for N in {1, 64, 4096}, the numpy batch
  API (host copies each step) and the registered single env ``dispatchrl/Pendulum-v1``, against
  gymnasium's ``gym.make("Pendulum-v1")`` single env. Target: >= 100x at N = 4096.
- Ant-v5, HalfCheetah-v5, Hopper-v5, Walker2d-v5, Humanoid-v5: the threaded MuJoCo batch with 1
  and 2 threads against gymnasium's ``gym.make(...)`` single env, and the 2-thread batch against
  the 1-thread one. Targets: Ant >= 1.6x gymnasium with 2 threads on a 2-core machine (issue 15);
  the others >= 1x gymnasium per env with 1 thread and >= 1.8x from 1 to 2 threads (issue 38).

Prints JSON lines (env steps per second, medians of interleaved repetitions, ratios vs the peer).
Usage: python benchmarks/envs.py [--quick]
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

# run as a script, this folder is sys.path[0], where benchmarks/mujoco.py would shadow the mujoco package
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

import dispatchrl as drl  # noqa: E402
import dispatchrl.envs as E  # noqa: E402
from dispatchrl.envs.halfcheetah import HalfCheetahBatch  # noqa: E402
from dispatchrl.envs.hopper import HopperBatch  # noqa: E402
from dispatchrl.envs.humanoid import HumanoidBatch  # noqa: E402
from dispatchrl.envs.walker2d import Walker2dBatch  # noqa: E402


def emit(**record):
    print(json.dumps(record), flush=True)


def median_rate(runs):
    """runs: list of (env_steps, seconds) → median env steps per second."""
    return statistics.median(steps / seconds for steps, seconds in runs)


def timed(fn):
    start = time.perf_counter()
    steps = fn()
    return steps, time.perf_counter() - start


def gym_loop(env, steps, actions):
    env.reset(seed=0)
    for t in range(steps):
        _, _, te, tr, _ = env.step(actions[t % len(actions)])
        if te or tr:
            env.reset()
    return steps


def pendulum(repeats, quick):
    rs = np.random.default_rng(0)
    actions = rs.uniform(-2, 2, size=(1000, 1)).astype(np.float32)
    peer = gym.make("Pendulum-v1")
    peer_steps = 5_000 if quick else 20_000
    ours = {}
    dev = drl.CPU()
    for n in (1, 64, 4096):
        env = E.Pendulum(n)
        state, rng = E.env_state(dev, env), drl.rng(dev, 0)
        action = drl.asarray(dev, rs.uniform(-2, 2, size=(n, 1)), np.float32)
        E.env_reset(dev, env, state, rng)

        def staged(device, env=env, state=state, action=action, rng=rng):
            E.env_step(device, env, state, action)
            E.env_reset_done(device, env, state, rng)

        step = drl.fuse(dev, staged)
        calls = max(1, (2_000_000 if not quick else 500_000) // n)
        step(10)
        ours[f"native_fused_N{n}"] = lambda step=step, calls=calls, n=n: (step(calls), n * calls)[1]
    batch = E.NativeBatch(E.Pendulum(4096))
    batch.reset(seed=0)
    batch_actions = rs.uniform(-2, 2, size=(4096, 1)).astype(np.float32)
    ours["numpy_batch_api_N4096"] = lambda: ([batch.step(batch_actions) for _ in range(20)], 20 * 4096)[1]
    single = gym.make("dispatchrl/Pendulum-v1")
    ours["gymnasium_api_N1"] = lambda: gym_loop(single, peer_steps, actions)

    peer_runs, our_runs = [], {k: [] for k in ours}
    for _ in range(repeats):  # interleaved, so load changes hit both sides alike
        peer_runs.append(timed(lambda: gym_loop(peer, peer_steps, actions)))
        for name, fn in ours.items():
            our_runs[name].append(timed(fn))
    peer_rate = median_rate(peer_runs)
    emit(benchmark="envs", env="Pendulum-v1", impl="gymnasium", num_envs=1, steps_per_second=round(peer_rate))
    for name, runs in our_runs.items():
        rate = median_rate(runs)
        n = int(name.rsplit("N", 1)[1])
        emit(
            benchmark="envs",
            env="Pendulum-v1",
            impl=f"dispatchrl_{name.rsplit('_N', 1)[0]}",
            num_envs=n,
            steps_per_second=round(rate),
            ratio_vs_gymnasium=round(rate / peer_rate, 2),
            **({"target_ratio": 100} if name == "native_fused_N4096" else {}),
        )


#: (gymnasium id, its dispatchrl batch, action columns)
MUJOCO = [
    ("Ant-v5", E.AntBatch, 8),
    ("HalfCheetah-v5", HalfCheetahBatch, 6),
    ("Hopper-v5", HopperBatch, 3),
    ("Walker2d-v5", Walker2dBatch, 6),
    ("Humanoid-v5", HumanoidBatch, 17),
]


def threaded_mujoco(env_id, batch_class, action_dim, repeats, quick):
    rs = np.random.default_rng(0)
    actions = rs.uniform(-1, 1, size=(200, action_dim)).astype(np.float32)
    peer = gym.make(env_id)
    peer_steps = 200 if quick else 600
    n = 16
    batch_steps = 20 if quick else 60
    batches = {threads: batch_class(n, num_threads=threads) for threads in (1, 2)}
    for b in batches.values():
        b.reset(seed=0)
    batch_actions = rs.uniform(-1, 1, size=(batch_steps, n, action_dim)).astype(np.float32)

    def run_batch(b):
        for t in range(batch_steps):
            b.step(batch_actions[t])
        return n * batch_steps

    peer_runs, our_runs = [], {t: [] for t in batches}
    for _ in range(repeats):
        peer_runs.append(timed(lambda: gym_loop(peer, peer_steps, actions)))
        for threads, b in batches.items():
            our_runs[threads].append(timed(lambda b=b: run_batch(b)))
    peer_rate = median_rate(peer_runs)
    emit(benchmark="envs", env=env_id, impl="gymnasium", num_envs=1, steps_per_second=round(peer_rate))
    rates = {threads: median_rate(runs) for threads, runs in our_runs.items()}
    for threads, rate in rates.items():
        targets = {}
        if env_id == "Ant-v5" and threads == 2:
            targets = {"target_ratio": 1.6}
        elif env_id != "Ant-v5":
            targets = {"target_ratio": 1.0} if threads == 1 else {"target_thread_scaling": 1.8}
        emit(
            benchmark="envs",
            env=env_id,
            impl="dispatchrl_threaded_batch",
            num_envs=n,
            threads=threads,
            steps_per_second=round(rate),
            ratio_vs_gymnasium=round(rate / peer_rate, 2),
            **({"thread_scaling": round(rate / rates[1], 2)} if threads == 2 else {}),
            **targets,
        )
    for b in batches.values():
        b.close()
    peer.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps and repetitions")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--envs", type=lambda v: v.lower().split(","), default=None, help="e.g. hopper,walker2d")
    parser.add_argument("--no-pendulum", action="store_true")
    args = parser.parse_args()
    repeats = args.repeats or (3 if args.quick else 7)
    if not args.no_pendulum:
        pendulum(repeats, args.quick)
    try:
        import imageio  # noqa: F401  (gymnasium's Ant-v5 needs it)
        import mujoco  # noqa: F401
    except ImportError as e:
        emit(benchmark="envs", env="mujoco", skipped=f"missing dependency: {e.name}")
        return
    for env_id, batch_class, action_dim in MUJOCO:
        if args.envs is None or env_id.split("-")[0].lower() in args.envs:
            threaded_mujoco(env_id, batch_class, action_dim, repeats, args.quick)


if __name__ == "__main__":
    main()
