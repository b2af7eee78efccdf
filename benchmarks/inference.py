"""Policy inference, the RLtools paper's Table 2 network: 13 → 64 → 64 → 4, ReLU, batch 1.

One run measures, side by side (medians of --repeats, JSON lines):
  exported-c      dispatchrl.export's policy.c, timed inside a C loop (clock_gettime), built
                  portable (-O2) and tuned (-O3 -march=native, as the C device builds)
  c-device        the C device's fused mlp_forward step, n forwards in one compiled call
  cpu-device      the CPU device's fused step the same way, and called once per forward from Python
  numpy           nn.Policy.__call__ (the Python reference) per observation
and the Cortex-M4 object's code and weight sizes (when zig cc or arm-none-eabi-gcc is present).

    python benchmarks/inference.py [--repeats 7] [--forwards 20000]
"""

import argparse
import ctypes
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import dispatchrl as drl
from dispatchrl import export
from dispatchrl.nn import Policy, mlp, mlp_buffers, mlp_forward

SIZES = (13, 64, 64, 4)

BENCH_C = """\
#define _POSIX_C_SOURCE 199309L
#include <time.h>
#include "policy.h"

/* ns per policy_forward over `iterations` calls; the action feeds the next observation so no
   call can be skipped */
double policy_bench_ns(long iterations)
{
    float obs[POLICY_OBSERVATION_DIM] = {0}, action[POLICY_ACTION_DIM];
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (long k = 0; k < iterations; k++) {
        policy_forward(obs, action);
        obs[k % POLICY_OBSERVATION_DIM] = 1e-3f * action[0];
    }
    clock_gettime(CLOCK_MONOTONIC, &end);
    return ((end.tv_sec - start.tv_sec) * 1e9 + (end.tv_nsec - start.tv_nsec)) / (double)iterations;
}
"""


def median_ns(measure, repeats):
    samples = [measure() for _ in range(repeats)]
    return statistics.median(samples), min(samples)


def per_call(fn, count):
    start = time.perf_counter()
    for _ in range(count):
        fn()
    return (time.perf_counter() - start) / count * 1e9


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--forwards", type=int, default=20000)
    args = parser.parse_args()
    n, repeats = args.forwards, args.repeats
    results = []

    def emit(**row):
        row = {"benchmark": "inference", "network": "13-64-64-4 relu, tanh output", "batch": 1, **row}
        results.append(row)
        print(json.dumps(row), flush=True)

    net = mlp(drl.CPU(), SIZES, "relu", "tanh", seed=0)
    policy = Policy.from_mlp(net, -1.0, 1.0)
    obs = np.random.default_rng(0).normal(size=SIZES[0]).astype(np.float32)

    with tempfile.TemporaryDirectory() as tmp:
        paths = export.write_policy(policy, tmp)
        bench = Path(tmp) / "bench.c"
        bench.write_text(BENCH_C)
        for flags in (("-O2",), ("-O3", "-march=native")):  # portable build, and tuned like the C device
            lib = export.host_library(paths["source"], [bench], name="policy" + "".join(flags), flags=flags)
            lib.policy_bench_ns.restype, lib.policy_bench_ns.argtypes = ctypes.c_double, (ctypes.c_long,)
            assert lib.policy_selftest() == 0
            lib.policy_bench_ns(n)  # warm up
            med, best = median_ns(lambda: lib.policy_bench_ns(n), repeats)
            emit(
                impl="exported-c" + ("" if flags == ("-O2",) else "-native"),
                ns_per_forward=med,
                min_ns=best,
                timing="inside a C loop",
                flags=" ".join(flags),
                compiler=" ".join(Path(c).name for c in export.target_compiler("host")[0]),
            )

    for device in (drl.C(), drl.CPU()):
        dnet = mlp(device, SIZES, "relu", "tanh", seed=0)
        buffers = mlp_buffers(device, dnet, 1)
        x = drl.asarray(device, obs[None])
        step = drl.fuse(device, mlp_forward, dnet, buffers, x)
        step(100)
        med, best = median_ns(lambda: _timed(step, n), repeats)
        emit(
            impl=f"{type(device).__name__.lower()}-device",
            ns_per_forward=med,
            min_ns=best,
            timing="fused step(n): n forwards in one compiled call (no squash)",
        )
    med, best = median_ns(lambda: per_call(step, n // 10), repeats)
    emit(
        impl="cpu-device-python-call",
        ns_per_forward=med,
        min_ns=best,
        timing="fused step() called once per forward from Python",
    )
    policy(obs)
    med, best = median_ns(lambda: per_call(lambda: policy(obs), n // 10), repeats)
    emit(impl="numpy", ns_per_forward=med, min_ns=best, timing="nn.Policy(obs) per call")

    try:
        with tempfile.TemporaryDirectory() as tmp:
            obj = export.write_policy(policy, tmp, target="cortex-m4")["binary"]
            sizes = export.code_size(obj)
            emit(
                impl="cortex-m4-object",
                text_bytes=sizes["text"],
                rodata_bytes=sizes["rodata"],
                data_bytes=sizes["data"],
                undefined=export.undefined_symbols(obj),
                compiler=" ".join(Path(c).name for c in export.target_compiler("cortex-m4")[0]),
            )
    except drl.DeviceError as e:
        emit(impl="cortex-m4-object", skipped=str(e))

    base = {r["impl"]: r.get("ns_per_forward") for r in results}
    emit(
        summary=True,
        machine=platform.machine(),
        exported_c_speedup_vs={k: round(v / base["exported-c"], 2) for k, v in base.items() if v and k != "exported-c"},
    )


def _timed(step, n):
    start = time.perf_counter()
    step(n)
    return (time.perf_counter() - start) / n * 1e9


if __name__ == "__main__":
    main()
