"""Replay buffer speed (issue 17): sample 128 of 100K transitions of the replay-buffer RFC's shapes
(3x4 obs, 3x4 action, bool done), uniform and prioritized (sample + priority update), from Python
and inside a fused step; memmap extend throughput. Peers in the same run when installed: TorchRL
(TensorDictReplayBuffer / TensorDictPrioritizedReplayBuffer) and Tianshou (ReplayBuffer /
PrioritizedReplayBuffer).

    python benchmarks/replay.py [--size 100000] [--batch 128] [--calls 2000]

One JSON line per measurement (µs per call, or rows/s), then a summary with the ratios and the
issue's targets (uniform sample from Python <= 5 µs; prioritized sample + update <= 0.05x TorchRL).
From Python both ``rb.sample()`` and the prepared ``rb.prepare()()`` (checks once, one compiled
call) are measured; a plain-numpy draw + take of the same rows runs first as a yardstick of the
machine's speed in this run, since the machines it runs on are often shared.
"""

import argparse
import json
import tempfile
import time

import numpy as np

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


def rfc_rows(n, seed=0):
    g = np.random.default_rng(seed)
    return {
        "obs": g.normal(size=(n, 3, 4)).astype(np.float32),
        "action": g.normal(size=(n, 3, 4)).astype(np.float32),
        "done": np.zeros(n, bool),
    }


def numpy_floor(size, batch, calls):
    """The same draw and gather in plain numpy (Generator.integers, one fancy index per leaf): not
    a replay buffer, a same-run yardstick of the machine's speed (it is shared)."""
    rows, g = rfc_rows(size), np.random.default_rng(0)
    leaves = tuple(rows.values())

    def draw_and_take():
        index = g.integers(0, size, batch)
        return [leaf[index] for leaf in leaves]

    us = per_call_us(draw_and_take, calls)
    emit(
        benchmark="replay",
        library="numpy",
        where="python",
        kind="uniform draw + take",
        size=size,
        batch=batch,
        us_per_call=us,
    )
    return us


def dispatchrl_python(size, batch, calls):
    """``rb.sample()`` (checks every call, a fresh TensorDict) and ``rb.prepare()()`` (checked
    once, one compiled draw+gather into preallocated rows)."""
    data = TensorDict(rfc_rows(size), [size])
    uniform = ReplayBuffer(DeviceStorage(size), batch_size=batch)
    uniform.extend(data)
    results = {}
    prepared = uniform.prepare()
    for kind, fn in (("uniform sample", uniform.sample), ("uniform prepared sample", prepared)):
        results[kind] = per_call_us(fn, calls)
        emit(
            benchmark="replay",
            library="dispatchrl",
            where="python",
            kind=kind,
            size=size,
            batch=batch,
            us_per_call=results[kind],
        )
    prioritized = ReplayBuffer(DeviceStorage(size), PrioritizedSampler(size, alpha=0.6, beta=0.4), batch_size=batch)
    prioritized.extend(data)
    priorities = np.random.default_rng(1).uniform(0.1, 2.0, batch)
    prepared_prioritized = prioritized.prepare()

    def sample_update():
        s = prioritized.sample()
        prioritized.update_priority(s["index"], priorities)

    def prepared_sample_update():
        prepared_prioritized()
        prepared_prioritized.update_priority(priorities)

    for kind, fn in (
        ("prioritized sample+update", sample_update),
        ("prioritized prepared sample+update", prepared_sample_update),
    ):
        results[kind] = per_call_us(fn, calls)
        emit(
            benchmark="replay",
            library="dispatchrl",
            where="python",
            kind=kind,
            size=size,
            batch=batch,
            us_per_call=results[kind],
        )
    return results


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


def torchrl_peer(size, batch, calls):
    try:
        import torch
        from tensordict import TensorDict as TorchTensorDict
        from torchrl.data import LazyTensorStorage, TensorDictPrioritizedReplayBuffer, TensorDictReplayBuffer
    except ImportError as exc:
        emit(benchmark="replay", library="torchrl", skipped=f"not installed ({exc.name})")
        return None, None
    rows = {k: torch.from_numpy(v) for k, v in rfc_rows(size).items()}
    data = TorchTensorDict(rows, [size])
    uniform = TensorDictReplayBuffer(storage=LazyTensorStorage(size), batch_size=batch)
    uniform.extend(data)
    us_uniform = per_call_us(uniform.sample, calls)
    emit(
        benchmark="replay",
        library="torchrl",
        where="python",
        kind="uniform sample",
        size=size,
        batch=batch,
        us_per_call=us_uniform,
    )
    prioritized = TensorDictPrioritizedReplayBuffer(
        alpha=0.6, beta=0.4, storage=LazyTensorStorage(size), batch_size=batch, priority_key="td_error"
    )
    prioritized.extend(data)
    priorities = torch.rand(batch) + 0.1

    def sample_update():
        s = prioritized.sample()
        prioritized.update_priority(s["index"], priorities)

    us_prioritized = per_call_us(sample_update, calls)
    emit(
        benchmark="replay",
        library="torchrl",
        where="python",
        kind="prioritized sample+update",
        size=size,
        batch=batch,
        us_per_call=us_prioritized,
    )
    return us_uniform, us_prioritized


def tianshou_peer(size, batch, calls):
    try:
        from tianshou.data import Batch, PrioritizedReplayBuffer
        from tianshou.data import ReplayBuffer as TianshouReplayBuffer
    except ImportError as exc:
        emit(benchmark="replay", library="tianshou", skipped=f"not installed ({exc.name})")
        return None, None
    rows = rfc_rows(size)
    results = []
    for kind, buf in (
        ("uniform sample", TianshouReplayBuffer(size)),
        ("prioritized sample+update", PrioritizedReplayBuffer(size, alpha=0.6, beta=0.4)),
    ):
        for i in range(size):
            buf.add(
                Batch(
                    obs=rows["obs"][i],
                    act=rows["action"][i],
                    rew=0.0,
                    terminated=False,
                    truncated=False,
                    obs_next=rows["obs"][i],
                    info={},
                )
            )
        priorities = np.random.default_rng(1).uniform(0.1, 2.0, batch)

        def call(buf=buf, kind=kind):
            _, index = buf.sample(batch)
            if kind != "uniform sample":
                buf.update_weight(index, priorities)

        us = per_call_us(call, calls)
        results.append(us)
        emit(benchmark="replay", library="tianshou", where="python", kind=kind, size=size, batch=batch, us_per_call=us)
    return tuple(results)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--fused-steps", type=int, default=2000)
    parser.add_argument("--memmap-chunk", type=int, default=1000)
    args = parser.parse_args()
    floor = numpy_floor(args.size, args.batch, args.calls)
    ours = dispatchrl_python(args.size, args.batch, args.calls)
    fused = dispatchrl_fused(args.size, args.batch, args.fused_steps)
    rate = memmap_extend(args.size, args.memmap_chunk)
    torchrl = torchrl_peer(args.size, args.batch, args.calls // 10)
    tianshou = tianshou_peer(args.size, args.batch, args.calls // 10)
    uniform, prioritized = ours["uniform prepared sample"], ours["prioritized prepared sample+update"]
    summary = {
        "benchmark": "replay",
        "summary": True,
        "numpy_floor_us": floor,
        "uniform_python_us": ours["uniform sample"],
        "uniform_prepared_python_us": uniform,
        "uniform_prepared_to_numpy_floor": round(uniform / floor, 3),
        "prioritized_python_us": ours["prioritized sample+update"],
        "prioritized_prepared_python_us": prioritized,
        "uniform_fused_us": fused[0],
        "prioritized_fused_us": fused[1],
        "memmap_extend_rows_per_second": rate,
        "target_uniform_python": "<= 5 us",
        "meets_uniform_target": uniform <= 5.0,
    }
    if torchrl[0] is not None:
        summary.update(
            torchrl_uniform_us=torchrl[0],
            torchrl_prioritized_us=torchrl[1],
            prioritized_ratio_to_torchrl=round(prioritized / torchrl[1], 4),
            meets_prioritized_target=prioritized <= 0.05 * torchrl[1],
        )
    if tianshou[0] is not None:
        summary.update(tianshou_uniform_us=tianshou[0], tianshou_prioritized_us=tianshou[1])
    emit(**summary)


if __name__ == "__main__":
    main()
