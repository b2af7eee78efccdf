"""Replay buffer speed (issue 17): sample 128 of 100K transitions of the replay-buffer RFC's shapes
(3x4 obs, 3x4 action, bool done), uniform and prioritized (sample + priority update), from Python
and inside a fused step; memmap extend throughput. Peers in the same run when installed: TorchRL
(TensorDictReplayBuffer / TensorDictPrioritizedReplayBuffer) and Tianshou (ReplayBuffer /
PrioritizedReplayBuffer).

    python benchmarks/replay.py [--size 100000] [--batch 128] [--rounds 30] [--calls 500]
                                [--peer-python /path/to/python]

One JSON line per measurement (µs per call, or rows/s), then a summary with the ratios and the
issue's targets (uniform sample from Python <= 5 µs; prioritized sample + update <= 0.05x TorchRL).
From Python both ``rb.sample()`` and the prepared ``rb.prepare()()`` (checks once, one compiled
call) are measured, with a plain-numpy draw + take of the same rows as a yardstick of the
machine's speed in this run, since the machines it runs on are often shared.

The Python measurements run in alternating rounds (each a batch of calls of every kind in turn,
the peers' included), so every kind sees the same load; each line gives the median over rounds
of the wall (time.perf_counter) and process CPU (time.process_time) µs per call, the least
disturbed round's wall figure, and the load average. The peers (benchmarks/replay_peers.py) run
in this process when importable here, or with ``--peer-python`` in a worker process of another
environment (e.g. a venv holding torch, torchrl and tianshou) whose rounds alternate with ours.
"""

import argparse
import json
import os
import subprocess
import tempfile
import time

import numpy as np
from replay_peers import peer_setup, rfc_rows, time_round

import dispatchrl as drl
from dispatchrl.data import (
    DeviceStorage,
    MemmapStorage,
    PrioritizedSampler,
    ReplayBuffer,
    TensorDict,
    replay_buffer,
    transitions,
)
from dispatchrl.kernels.offpolicy.api import replay_add, replay_sample
from dispatchrl.kernels.replay import priority_mark_new, priority_sample, priority_update, replay_gather
from dispatchrl.kernels.replay.api import EMPTY, tree_leaves


def emit(**record):
    print(json.dumps(record), flush=True)


def per_call_us(fn, calls, repeats=5):
    """Best of ``repeats`` means over ``calls`` calls (the machine is shared: the minimum is the
    least disturbed figure)."""
    fn()
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return round(best * 1e6, 2)


def dispatchrl_fused(size, batch, steps):
    """One compiled CPU step per call of ``step(n)``: the draw and the gather (and, prioritized,
    the tree update) with nothing in Python between steps."""
    dev = drl.CPU()
    rows = rfc_rows(size)
    buffer = replay_buffer(dev, size, 12, 12)
    flat = {k: drl.asarray(dev, v.reshape(size, -1)) for k, v in rows.items() if k != "done"}
    replay_add(
        dev,
        buffer,
        flat["obs"],
        flat["action"],
        drl.zeros(dev, size),
        flat["obs"],
        drl.asarray(dev, rows["done"]),
        drl.asarray(dev, rows["done"]),
    )
    out = transitions(dev, batch, 12, 12)
    rng = drl.rng(dev, 0)
    uniform = drl.fuse(dev, lambda d: replay_sample(d, rng, buffer, out))
    leaves = tree_leaves(size)
    sum_tree, min_tree = drl.zeros(dev, 2 * leaves, np.float64), drl.asarray(dev, np.full(2 * leaves, EMPTY))
    max_p, beta = drl.asarray(dev, np.ones(1)), drl.asarray(dev, np.array([0.4]))
    zero = drl.zeros(dev, 1, np.int64)
    priority_mark_new(dev, sum_tree, min_tree, max_p, zero, size, size, 0.6, 1e-6)
    index, weight = drl.zeros(dev, batch, np.int64), drl.zeros(dev, batch)
    priority = drl.asarray(dev, np.random.default_rng(1).uniform(0.1, 2.0, batch), np.float32)

    def prioritized_step(d):
        priority_sample(d, rng, sum_tree, min_tree, buffer.size, beta, index, weight)
        replay_gather(d, buffer, index, out)
        priority_update(d, sum_tree, min_tree, max_p, index, priority, 0.6, 1e-6)

    prioritized = drl.fuse(dev, prioritized_step)
    results = []
    for kind, step in (("uniform sample", uniform), ("prioritized sample+update", prioritized)):
        us = per_call_us(lambda step=step: step(steps), 3) / steps
        results.append(round(us, 3))
        emit(
            benchmark="replay",
            library="dispatchrl",
            where="fused CPU step",
            kind=kind,
            size=size,
            batch=batch,
            us_per_call=round(us, 3),
        )
    return results


def memmap_extend(size, chunk):
    data = TensorDict(rfc_rows(chunk), [chunk])
    with tempfile.TemporaryDirectory() as folder:
        rb = ReplayBuffer(MemmapStorage(size, folder + "/rb"))
        rb.extend(data)  # creates the files
        start = time.perf_counter()
        for _ in range(size // chunk):
            rb.extend(data)
        rb.storage.flush()
        seconds = time.perf_counter() - start
    rate = round(size // chunk * chunk / seconds)
    emit(
        benchmark="replay",
        library="dispatchrl",
        where="python",
        kind="memmap extend",
        size=size,
        chunk=chunk,
        rows_per_second=rate,
    )
    return rate


def python_kinds(size, batch) -> dict:
    """{(library, kind): fn} timed from Python in this process: the numpy yardstick,
    ``rb.sample()`` (checks every call, a fresh TensorDict) and ``rb.prepare()()`` (checked once,
    one compiled draw+gather into preallocated rows), uniform and prioritized with its update."""
    rows, g = rfc_rows(size), np.random.default_rng(0)
    leaves = tuple(rows.values())

    def draw_and_take():  # not a replay buffer: Generator.integers and one fancy index per leaf
        index = g.integers(0, size, batch)
        return [leaf[index] for leaf in leaves]

    data = TensorDict(rows, [size])
    uniform = ReplayBuffer(DeviceStorage(size), batch_size=batch)
    uniform.extend(data)
    prioritized = ReplayBuffer(DeviceStorage(size), PrioritizedSampler(size, alpha=0.6, beta=0.4), batch_size=batch)
    prioritized.extend(data)
    priorities = np.random.default_rng(1).uniform(0.1, 2.0, batch)
    prepared, prepared_prioritized = uniform.prepare(), prioritized.prepare()

    def sample_update():
        s = prioritized.sample()
        prioritized.update_priority(s["index"], priorities)

    def prepared_sample_update():
        prepared_prioritized()
        prepared_prioritized.update_priority(priorities)

    return {
        ("numpy", "uniform draw + take"): draw_and_take,
        ("dispatchrl", "uniform sample"): uniform.sample,
        ("dispatchrl", "uniform prepared sample"): prepared,
        ("dispatchrl", "prioritized sample+update"): sample_update,
        ("dispatchrl", "prioritized prepared sample+update"): prepared_sample_update,
    }


class PeerWorker:
    """benchmarks/replay_peers.py --serve under another Python (see its protocol)."""

    def __init__(self, python, size, batch):
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "replay_peers.py")
        self.process = subprocess.Popen(
            [python, script, "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        hello = self._ask({"size": size, "batch": batch})
        self.kinds = [tuple(k) for k in hello["kinds"]]
        self.skipped, self.versions = hello["skipped"], hello["versions"]

    def _ask(self, message) -> dict:
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the peer worker exited (code {self.process.wait()})")
        return json.loads(line)

    def round(self, library, kind, calls) -> tuple[float, float]:
        answer = self._ask({"library": library, "kind": kind, "calls": calls})
        return answer["wall_us"], answer["cpu_us"]

    def close(self) -> None:
        self.process.stdin.write("\n")
        self.process.stdin.close()
        self.process.wait()


def alternating_rounds(ours, peers, worker, rounds, calls, peer_calls) -> dict:
    """{(library, kind): record}: ``rounds`` rounds, each one batch of calls of every kind in turn
    (``peer_calls`` for the peers, which are ~100x slower), medians over the rounds."""
    runners = {key: (lambda fn=fn, n=calls: time_round(fn, n)) for key, fn in ours.items()}
    runners.update({key: (lambda fn=fn: time_round(fn, peer_calls)) for key, fn in peers.items()})
    if worker is not None:
        runners.update({key: (lambda key=key: worker.round(*key, peer_calls)) for key in worker.kinds})
    for run in runners.values():  # warm up (and compile) outside the rounds
        run()
    walls = {key: [] for key in runners}
    cpus = {key: [] for key in runners}
    load_before = os.getloadavg()
    for _ in range(rounds):
        for key, run in runners.items():
            wall, cpu = run()
            walls[key].append(wall)
            cpus[key].append(cpu)
    load = [round(x, 2) for x in (*load_before, *os.getloadavg())]
    return {
        key: {
            "us_per_call": round(float(np.median(walls[key])), 2),
            "cpu_us_per_call": round(float(np.median(cpus[key])), 2),
            "min_round_us_per_call": round(min(walls[key]), 2),
            "rounds": rounds,
            "calls_per_round": calls if key in ours else peer_calls,
            "load_average_before_after": load,
        }
        for key in runners
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--calls", type=int, default=500, help="calls per round of each of ours")
    parser.add_argument("--peer-calls", type=int, default=20, help="calls per round of each peer")
    parser.add_argument("--peer-python", help="time the peers in a worker under this Python (another venv)")
    parser.add_argument("--fused-steps", type=int, default=2000)
    parser.add_argument("--memmap-chunk", type=int, default=1000)
    args = parser.parse_args()
    ours = python_kinds(args.size, args.batch)
    worker, peers = None, {}
    if args.peer_python:
        worker = PeerWorker(args.peer_python, args.size, args.batch)
        skipped, versions = worker.skipped, worker.versions
    else:
        peers, skipped, versions = peer_setup(args.size, args.batch)
    for library, why in skipped.items():
        emit(benchmark="replay", library=library, skipped=why)
    try:
        timed = alternating_rounds(ours, peers, worker, args.rounds, args.calls, args.peer_calls)
    finally:
        if worker is not None:
            worker.close()
    for (library, kind), record in timed.items():
        emit(benchmark="replay", library=library, where="python", kind=kind, size=args.size, batch=args.batch, **record)
    # the prepared uniform call alone, many rounds in a row: its rows stay in cache between calls,
    # so this is the call and copy without the other kinds' evictions (the rounds above include them)
    isolated = [time_round(ours[("dispatchrl", "uniform prepared sample")], args.calls)[0] for _ in range(args.rounds)]
    emit(
        benchmark="replay",
        library="dispatchrl",
        where="python",
        kind="uniform prepared sample, alone",
        size=args.size,
        batch=args.batch,
        us_per_call=round(float(np.median(isolated)), 2),
        min_round_us_per_call=round(min(isolated), 2),
        load_average=[round(x, 2) for x in os.getloadavg()],
    )
    fused = dispatchrl_fused(args.size, args.batch, args.fused_steps)
    rate = memmap_extend(args.size, args.memmap_chunk)

    def us(library, kind):
        record = timed.get((library, kind))
        return None if record is None else record["us_per_call"]

    floor = us("numpy", "uniform draw + take")
    uniform, prioritized = (
        us("dispatchrl", "uniform prepared sample"),
        us("dispatchrl", "prioritized prepared sample+update"),
    )
    summary = {
        "benchmark": "replay",
        "summary": True,
        "numpy_floor_us": floor,
        "uniform_python_us": us("dispatchrl", "uniform sample"),
        "uniform_prepared_python_us": uniform,
        "uniform_prepared_cpu_us": timed[("dispatchrl", "uniform prepared sample")]["cpu_us_per_call"],
        "uniform_prepared_alone_us": round(float(np.median(isolated)), 2),
        "uniform_prepared_to_numpy_floor": round(uniform / floor, 3),
        "prioritized_python_us": us("dispatchrl", "prioritized sample+update"),
        "prioritized_prepared_python_us": prioritized,
        "uniform_fused_us": fused[0],
        "prioritized_fused_us": fused[1],
        "memmap_extend_rows_per_second": rate,
        "target_uniform_python": "<= 5 us",
        "meets_uniform_target": uniform <= 5.0,
        "load_average_before_after": timed[("dispatchrl", "uniform prepared sample")]["load_average_before_after"],
        "peer_versions": {k: v for k, v in versions.items() if v != "not installed"},
    }
    for library in ("torchrl", "tianshou"):
        peer_uniform, peer_prioritized = us(library, "uniform sample"), us(library, "prioritized sample+update")
        if peer_uniform is None:
            continue
        summary[f"{library}_uniform_us"] = peer_uniform
        summary[f"{library}_prioritized_us"] = peer_prioritized
        summary[f"uniform_prepared_to_{library}"] = round(uniform / peer_uniform, 4)
        summary[f"prioritized_prepared_to_{library}"] = round(prioritized / peer_prioritized, 4)
    if us("torchrl", "prioritized sample+update") is not None:
        summary["target_prioritized"] = "<= 0.05x TorchRL"
        summary["meets_prioritized_target"] = prioritized <= 0.05 * us("torchrl", "prioritized sample+update")
    emit(**summary)


if __name__ == "__main__":
    main()
