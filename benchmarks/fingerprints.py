"""Numerical fingerprints of short training runs, to prove a refactor changes no bit.

Each case trains from the CLI in a subprocess that imports TREE (``PYTHONPATH``), saves a
checkpoint and hashes every state array in it (sha256 of the raw bytes) together with the CLI's
evaluation return. Two trees are bit-identical where their JSON files are equal:

    python benchmarks/fingerprints.py --tree /path/to/before --out before.json
    python benchmarks/fingerprints.py --tree . --out after.json --compare before.json

``--quick`` runs only the cpu cases (seconds once compiled); the full set adds the c and generic
devices, a resume, both ``DISPATCHRL_GEMM`` modes and two learner threads (whose cases must equal
their one-thread twins in the same run). Prints one JSON line per case.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

PPO_SMALL = ["--set", "num_envs=8", "--set", "batch_size=256"]
# n-step windows and prioritized replay on CartPole (a later --env replaces the cases' pendulum)
DQN_REPLAY = ["--env", "cartpole", "--set", "n_step=3", "--set", "prioritized=true"]
# (name, algorithm, device, extra CLI flags, extra environment); "resume" cases train half the
# budget, then resume to the full budget from the checkpoint.
CASES: list[tuple[str, str, str, list[str], dict[str, str]]] = [
    ("td3-cpu", "td3", "cpu", ["--steps", "2000"], {}),
    ("sac-cpu", "sac", "cpu", ["--steps", "2000"], {}),
    ("ppo-cpu", "ppo", "cpu", ["--steps", "4096", *PPO_SMALL], {}),
    ("td3-cpu-blas", "td3", "cpu", ["--steps", "2000"], {"DISPATCHRL_GEMM": "blas"}),
    ("td3-cpu-tiled", "td3", "cpu", ["--steps", "2000"], {"DISPATCHRL_GEMM": "tiled"}),
    ("td3-cpu-resume", "td3", "cpu", ["--steps", "2000"], {}),
    ("td3-c", "td3", "c", ["--steps", "1000"], {}),
    ("td3-generic", "td3", "generic", ["--steps", "300"], {}),
    ("sac-generic", "sac", "generic", ["--steps", "300"], {}),
    ("ppo-generic", "ppo", "generic", ["--steps", "1024", *PPO_SMALL], {}),
    ("dqn-cpu-nstep", "dqn", "cpu", ["--steps", "3000", *DQN_REPLAY], {}),
    ("dqn-generic-nstep", "dqn", "generic", ["--steps", "400", *DQN_REPLAY], {}),
    # the multirotor's recipe (observation noise, resets, curriculum) past its 15k warm-up steps
    ("td3-cpu-multirotor", "td3", "cpu", ["--env", "multirotor", "--steps", "17000"], {}),
    ("td3-c-multirotor", "td3", "c", ["--env", "multirotor", "--steps", "16000"], {}),
    # the products split over two learner threads: each must equal its twin (THREADS_TWINS)
    ("td3-cpu-threads", "td3", "cpu", ["--steps", "2000"], {"DISPATCHRL_LEARNER_THREADS": "2"}),
    ("sac-cpu-threads", "sac", "cpu", ["--steps", "2000"], {"DISPATCHRL_LEARNER_THREADS": "2"}),
    (
        "td3-cpu-multirotor-threads",
        "td3",
        "cpu",
        ["--env", "multirotor", "--steps", "40000"],
        {"DISPATCHRL_LEARNER_THREADS": "2"},
    ),
    ("td3-cpu-multirotor-40k", "td3", "cpu", ["--env", "multirotor", "--steps", "40000"], {}),
]
QUICK = {"td3-cpu", "sac-cpu", "ppo-cpu", "dqn-cpu-nstep"}
THREADS_TWINS = {
    "td3-cpu-threads": "td3-cpu",
    "sac-cpu-threads": "sac-cpu",
    "td3-cpu-multirotor-threads": "td3-cpu-multirotor-40k",
}


def cli(tree: Path, args: list[str], env_extra: dict[str, str], workdir: str) -> dict:
    """Run ``dispatchrl train ARGS --save workdir/ck``; hash the checkpoint's state arrays."""
    env = dict(os.environ, PYTHONPATH=str(tree), **env_extra)
    cmd = [sys.executable, "-m", "dispatchrl", "train", *args, "--save", f"{workdir}/ck", "--json"]
    proc = subprocess.run([*cmd, "--eval-episodes", "2"], env=env, capture_output=True, text=True, cwd=workdir)
    if proc.returncode:
        return {"error": proc.stderr[-1500:]}
    line = json.loads(proc.stdout.strip().splitlines()[-1])
    with np.load(f"{workdir}/ck.npz") as archive:
        hashes = {
            n: hashlib.sha256(archive[n].tobytes()).hexdigest()[:16] for n in sorted(archive.files) if "meta" not in n
        }
    return {"eval_return": line.get("eval_return"), "arrays": hashes}


def run_case(tree: Path, name: str, algo: str, device: str, extra: list[str], env_extra: dict[str, str]) -> dict:
    run = [algo, "--env", "pendulum", "--device", device, "--seed", "3", *extra]
    with tempfile.TemporaryDirectory() as workdir:
        if not name.endswith("-resume"):
            return cli(tree, run, env_extra, workdir)
        steps = run[run.index("--steps") + 1]
        run[run.index("--steps") + 1] = str(int(steps) // 2)
        first = cli(tree, run, env_extra, workdir)
        if "error" in first:
            return first
        return cli(tree, [algo, "--resume", f"{workdir}/ck", "--steps", steps], env_extra, workdir)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--compare", type=Path, help="a JSON file from another tree; exit 1 on any difference")
    parser.add_argument("--quick", action="store_true", help="only the cpu cases")
    parser.add_argument("--only", nargs="*", help="case names to run")
    args = parser.parse_args()
    results = {}
    for name, algo, device, extra, env_extra in CASES:
        if (args.quick and name not in QUICK) or (args.only and name not in args.only):
            continue
        results[name] = run_case(args.tree.resolve(), name, algo, device, extra, env_extra)
        print(
            json.dumps(
                {"case": name, "eval_return": results[name].get("eval_return"), "error": "error" in results[name]}
            ),
            flush=True,
        )
    args.out.write_text(json.dumps(results, indent=1, sort_keys=True))
    # threads change no bit: a "-threads" case equals its one-thread twin of this run
    bases = {n: b for n, b in THREADS_TWINS.items() if n in results and b in results}
    threads_differing = [n for n, b in bases.items() if results[n] != results[b]]
    if bases:
        print(json.dumps({"threads_compared": len(bases), "threads_differing": threads_differing}))
    if args.compare is None:
        return 1 if threads_differing else 0
    before = json.loads(args.compare.read_text())
    differing = [n for n in results if n in before and before[n] != results[n]]
    errors = [n for n in results if "error" in results[n]]
    print(json.dumps({"compared": len([n for n in results if n in before]), "differing": differing, "errors": errors}))
    return 1 if differing or errors or threads_differing else 0


if __name__ == "__main__":
    sys.exit(main())
