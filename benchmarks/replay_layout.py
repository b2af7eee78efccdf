"""Where a cold uniform replay gather's time goes (issue 17): the storage layouts that could make
``rb.prepare()()`` faster when other work has evicted the rows, measured against today's layout.

Gathers 128 random rows of 100K replay-buffer-RFC rows (3x4 float32 obs and action, bool done)
into preallocated outputs, as ``PreparedSample`` does (every row prefetched, then copied as 8-byte
words), from four storages:

- ``per-leaf``: one C array per leaf, as ``DeviceStorage()`` stores rows today (a row is ~4 cache
  lines: 48-byte obs and action rows straddle a line half the time, plus the done byte);
- ``interleaved``: one array of 104-byte records, obs | action | done (a row is ~2.6 lines: the
  array-of-structs layout NOTES.md proposed for issue 17);
- ``interleaved-128``: the same padded to 128-byte records (2 lines, line-pair aligned);
- ``per-leaf-hugepages``: per-leaf arrays on 2 MB-aligned memory advised MADV_HUGEPAGE (no TLB
  misses from the guest's page tables).

Each round first streams through 64 MB (as the peers' rounds do in benchmarks/replay.py), then
makes ``--calls`` calls: "cold" is the first round's kind of call, "warm" the same calls repeated
at once. The kinds alternate within every round; medians over rounds. All four take the same
seven arguments, so the call overhead (~2-3 µs here, more than the one-argument prepared call)
is the same in each and the differences are the memory system's.

The library's own prepared sample, tried with interleaved host storage (2026-11-23, AMD EPYC Zen 3,
AVX2), gained much less than this kernel does: 0.88-0.94x the per-leaf time cold, and a same-run
benchmarks/replay.py A/B came out the other way, so the layout was not kept (NOTES.md, issue 17).

    python benchmarks/replay_layout.py [--rounds 15] [--calls 500]
"""

import argparse
import ctypes
import json
import os
import time

import numpy as np
from numba import njit
from step_breakdown import machine

from dispatchrl.kernels.replay.cpu import prefetch_row

ROWS, BATCH, WORDS = 100_000, 128, 6  # 48-byte obs and action rows: 6 words each
HUGE = 2 * 1024 * 1024
MADV_HUGEPAGE = 14


def emit(**record) -> None:
    print(json.dumps(record), flush=True)


@njit(cache=True)
def gather_per_leaf(index, obs, action, done, out_obs, out_action, out_done):
    for k in range(index.shape[0]):
        prefetch_row(obs, index[k])
        prefetch_row(action, index[k])
        prefetch_row(done, index[k])
    for k in range(index.shape[0]):
        for j in range(WORDS):
            out_obs[k, j] = obs[index[k], j]
    for k in range(index.shape[0]):
        for j in range(WORDS):
            out_action[k, j] = action[index[k], j]
    for k in range(index.shape[0]):
        out_done[k, 0] = done[index[k], 0]


@njit(cache=True)
def gather_interleaved(index, records, record_bytes, unused, out_obs, out_action, out_done):
    """records: (rows, words) uint64; obs words 0-5, action 6-11, done the byte at 96."""
    as_bytes = records.view(np.uint8)
    for k in range(index.shape[0]):
        prefetch_row(records, index[k])
    for k in range(index.shape[0]):
        row = index[k]
        for j in range(WORDS):
            out_obs[k, j] = records[row, j]
        for j in range(WORDS):
            out_action[k, j] = records[row, WORDS + j]
        out_done[k, 0] = as_bytes[row, 96]


def hugepage_array(shape, dtype) -> np.ndarray:
    """A zeroed array on 2 MB-aligned memory advised MADV_HUGEPAGE (Linux), faulted in."""
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    rounded = -(-size // HUGE) * HUGE
    raw = np.zeros(rounded + HUGE, np.uint8)
    start = (-raw.ctypes.data) % HUGE
    block = raw[start : start + rounded]
    ctypes.CDLL(None).madvise(ctypes.c_void_p(block.ctypes.data), ctypes.c_size_t(rounded), MADV_HUGEPAGE)
    block[:] = 0
    return block[:size].view(dtype).reshape(shape)


def huge_pages_kib() -> int:
    with open("/proc/self/smaps_rollup") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("AnonHugePages"))


def storages(g) -> dict:
    obs = g.integers(0, 2**63, (ROWS, WORDS), dtype=np.uint64)
    action = g.integers(0, 2**63, (ROWS, WORDS), dtype=np.uint64)
    done = (g.random((ROWS, 1)) < 0.1).astype(np.uint8)
    kinds = {"per-leaf": (gather_per_leaf, obs, action, done)}
    for name, words in (("interleaved", 13), ("interleaved-128", 16)):
        records = np.zeros((ROWS, words), np.uint64)
        records[:, :WORDS], records[:, WORDS : 2 * WORDS] = obs, action
        records.view(np.uint8)[:, 96] = done[:, 0]
        kinds[name] = (gather_interleaved, records, words * 8, 0)
    huge = [hugepage_array(a.shape, a.dtype) for a in (obs, action, done)]
    for target, source in zip(huge, (obs, action, done)):
        target[...] = source
    kinds["per-leaf-hugepages"] = (gather_per_leaf, *huge)
    return kinds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=500)
    args = parser.parse_args()
    g = np.random.default_rng(0)
    kinds = storages(g)
    outputs = (np.zeros((BATCH, WORDS), np.uint64), np.zeros((BATCH, WORDS), np.uint64), np.zeros((BATCH, 1), np.uint8))
    indices = [g.integers(0, ROWS, BATCH) for _ in range(args.calls)]
    expected = [leaf[indices[0]] for leaf in kinds["per-leaf"][1:]]
    for name, (fn, *arrays) in kinds.items():  # compile, and check every layout gathers the same rows
        fn(indices[0], *arrays, *outputs)
        if not all(np.array_equal(o, e) for o, e in zip(outputs, expected)):
            raise AssertionError(f"{name}: gathered other rows than the per-leaf storage")
    evict = np.ones(64 * 1024 * 1024 // 8)
    cold, warm = {k: [] for k in kinds}, {k: [] for k in kinds}
    load = os.getloadavg()
    for _ in range(args.rounds):
        for name, (fn, *arrays) in kinds.items():
            evict[::8] += 1.0  # one touch per cache line of 64 MB
            for times in (cold[name], warm[name]):
                start = time.perf_counter()
                for index in indices:
                    fn(index, *arrays, *outputs)
                times.append((time.perf_counter() - start) / len(indices) * 1e6)
    info = machine()
    for name in kinds:
        emit(
            benchmark="replay_layout",
            layout=name,
            cold_us_per_call=round(float(np.median(cold[name])), 2),
            warm_us_per_call=round(float(np.median(warm[name])), 2),
            cold_to_per_leaf=round(float(np.median(cold[name]) / np.median(cold["per-leaf"])), 3),
            rounds=args.rounds,
            calls=args.calls,
            load_average_before_after=[round(x, 2) for x in (*load, *os.getloadavg())],
            cpu=info.get("cpu"),
        )
    emit(benchmark="replay_layout", anon_huge_pages_kib=huge_pages_kib(), machine=info)


if __name__ == "__main__":
    main()
