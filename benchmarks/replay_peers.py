"""The peers of benchmarks/replay.py (issue 17): TorchRL's TensorDictReplayBuffer /
TensorDictPrioritizedReplayBuffer and Tianshou's ReplayBuffer / PrioritizedReplayBuffer, timed on
the same rows (128 of 100K transitions of the replay-buffer RFC's shapes).

It imports numpy and the peers only, never dispatchrl, so it can run in another Python
environment: ``replay.py --peer-python /path/to/python`` starts it there as a worker
(``--serve``) and times it in rounds that alternate with its own, so both see the same load.

    python benchmarks/replay_peers.py --serve

Protocol (one JSON object per line): the parent sends ``{"size": N, "batch": B}``, the worker
answers ``{"kinds": [[library, kind], ...], "skipped": {library: why}, "versions": {...}}``; then
each ``{"library": L, "kind": K, "calls": C}`` is answered with ``{"wall_us": ..., "cpu_us": ...}``
per call over C calls; an empty line ends it.
"""

import argparse
import json
import sys
import time

import numpy as np

__all__ = ["peer_setup", "rfc_rows", "time_round"]


def rfc_rows(n, seed=0) -> dict:
    """The RFC's transitions: 3x4 float32 obs and action, bool done (the rows replay.py uses)."""
    g = np.random.default_rng(seed)
    return {
        "obs": g.normal(size=(n, 3, 4)).astype(np.float32),
        "action": g.normal(size=(n, 3, 4)).astype(np.float32),
        "done": np.zeros(n, bool),
    }


def time_round(fn, calls) -> tuple[float, float]:
    """(wall µs, process CPU µs) per call over ``calls`` calls."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - wall) / calls * 1e6, (time.process_time() - cpu) / calls * 1e6


def _torchrl(size, batch) -> dict:
    import torch
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, TensorDictPrioritizedReplayBuffer, TensorDictReplayBuffer

    data = TensorDict({k: torch.from_numpy(v) for k, v in rfc_rows(size).items()}, [size])
    uniform = TensorDictReplayBuffer(storage=LazyTensorStorage(size), batch_size=batch)
    uniform.extend(data)
    prioritized = TensorDictPrioritizedReplayBuffer(
        alpha=0.6, beta=0.4, storage=LazyTensorStorage(size), batch_size=batch, priority_key="td_error"
    )
    prioritized.extend(data)
    priorities = torch.from_numpy(np.random.default_rng(1).uniform(0.1, 2.0, batch).astype(np.float32))

    def sample_update():
        s = prioritized.sample()
        prioritized.update_priority(s["index"], priorities)

    return {"uniform sample": uniform.sample, "prioritized sample+update": sample_update}


def _tianshou(size, batch) -> dict:
    from tianshou.data import Batch, PrioritizedReplayBuffer
    from tianshou.data import ReplayBuffer as TianshouReplayBuffer

    rows = rfc_rows(size)
    # Tianshou's buffer holds its reserved keys: the RFC's three plus scalar reward/terminated/
    # truncated and obs_next (= obs here), all gathered by sample(); filled the way its
    # from_data does (set_batch), since 100K add() calls take minutes.
    data = Batch(
        obs=rows["obs"],
        act=rows["action"],
        rew=np.zeros(size),
        terminated=rows["done"],
        truncated=rows["done"],
        done=rows["done"],
        obs_next=rows["obs"],
    )
    uniform = TianshouReplayBuffer(size)
    uniform.set_batch(data)
    uniform._size = size
    prioritized = PrioritizedReplayBuffer(size, alpha=0.6, beta=0.4)
    prioritized.set_batch(data)
    prioritized._size = size
    prioritized.init_weight(np.arange(size))
    priorities = np.random.default_rng(1).uniform(0.1, 2.0, batch)

    def sample_update():
        _, index = prioritized.sample(batch)
        prioritized.update_weight(index, priorities)

    return {"uniform sample": lambda: uniform.sample(batch), "prioritized sample+update": sample_update}


def _version(module) -> str:
    try:
        return __import__(module).__version__
    except ImportError:
        return "not installed"


def peer_setup(size, batch) -> tuple[dict, dict, dict]:
    """({(library, kind): fn}, {library: why skipped}, {package: version}) for the peers importable here."""
    fns, skipped = {}, {}
    for library, setup in (("torchrl", _torchrl), ("tianshou", _tianshou)):
        try:
            made = setup(size, batch)
        except ImportError as exc:
            skipped[library] = f"not installed ({exc.name})"
            continue
        for kind, fn in made.items():
            fn()  # first call: lazy setup outside the timing
            fns[(library, kind)] = fn
    versions = {m: _version(m) for m in ("torch", "tensordict", "torchrl", "tianshou", "numpy")}
    return fns, skipped, versions


def serve(stdin=sys.stdin, stdout=sys.stdout) -> None:
    """The worker side of the protocol in the module docstring."""
    sys.stdout = sys.stderr  # the peers' own prints and logs stay off the protocol's lines
    setup = json.loads(stdin.readline())
    fns, skipped, versions = peer_setup(setup["size"], setup["batch"])
    print(json.dumps({"kinds": [list(k) for k in fns], "skipped": skipped, "versions": versions}), file=stdout)
    stdout.flush()
    for line in stdin:
        if not line.strip():
            break
        ask = json.loads(line)
        wall, cpu = time_round(fns[(ask["library"], ask["kind"])], ask["calls"])
        print(json.dumps({"wall_us": wall, "cpu_us": cpu}), file=stdout)
        stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", action="store_true", help="run as replay.py's worker (JSON lines on stdin/stdout)")
    args = parser.parse_args()
    if not args.serve:
        parser.error("run benchmarks/replay.py (with --peer-python for peers in another environment)")
    serve()


if __name__ == "__main__":
    main()
