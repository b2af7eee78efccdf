"""Dense layer forward+backward on CPU vs CUDA, sweeping width and batch.

The step (dense_forward then dense_backward with input gradient, width×width, relu) is written
once and fused per device. Prints one JSON line per (device, width, batch), then a table of
CPU/CUDA time ratios and, per width, the smallest batch at which the GPU wins. First it times the
``dispatchrl demo`` step (MLP 4-64-64-1, batch 100, MSE + Adam) per device. Each CUDA row says
which program the step compiled to: "single-block" (one kernel launch per step(n)) or "launches"
(the per-kernel loop, for shapes above SINGLE_BLOCK_MAX_WORK). Without a GPU (or under
NUMBA_ENABLE_CUDASIM, whose timings mean nothing) it measures the CPU only.

    python benchmarks/cpu_vs_gpu.py [--widths 16,64,256,1024] [--batches 1,16,256,4096] [--block 256]
"""

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

import dispatchrl as drl
from dispatchrl import nn


def layer_step(device, x, W, b, pre, out, d_out, d_pre, dW, db, d_x):
    drl.dense_forward(device, x, W, b, pre, out, "relu")
    drl.dense_backward(device, x, W, pre, out, d_out, d_pre, dW, db, d_x, "relu")


def make_step(device, width, batch):
    g = np.random.default_rng(0)
    arrays = [
        drl.asarray(device, g.normal(size=s), np.float32)
        for s in (
            (batch, width),
            (width, width),
            (width,),
            (batch, width),
            (batch, width),
            (batch, width),
            (batch, width),
            (width, width),
            (width,),
            (batch, width),
        )
    ]
    return drl.fuse(device, layer_step, *arrays)


def make_demo_step(device, batch=100):
    """The ``dispatchrl demo`` step: MLP 4-64-64-1 regression, MSE + Adam."""
    g = np.random.default_rng(0)
    x = g.uniform(-2, 2, size=(batch, 4))
    y = np.sin(x).sum(axis=1, keepdims=True)
    net = nn.mlp(device, (4, 64, 64, 1), activation="relu", seed=0)
    buffers = nn.mlp_buffers(device, net, batch)
    loss = drl.zeros(device, 1)
    x_dev, y_dev = drl.asarray(device, x, np.float32), drl.asarray(device, y, np.float32)
    return drl.fuse(device, nn.mlp_train_step, net, buffers, x_dev, y_dev, loss)


def program_kind(step) -> str:
    return "single-block" if getattr(step._run, "kernels", None) == 1 else "launches"


def seconds_per_step(device, step, synchronize, budget=0.2, repeats=5):
    step(1)
    synchronize()
    n, elapsed = 1, 0.0
    while elapsed < budget / repeats and n < 1 << 20:  # grow n until one timing takes long enough
        start = time.perf_counter()
        step(n)
        synchronize()
        elapsed = time.perf_counter() - start
        n *= 2
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step(n)
        synchronize()
        times.append((time.perf_counter() - start) / n)
    return statistics.median(times)


def gpu_device():
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return None, "NUMBA_ENABLE_CUDASIM=1: simulator timings are meaningless"
    try:
        from numba import cuda

        device = drl.CUDA()
        name = cuda.get_current_device().name
        return device, name.decode() if isinstance(name, bytes) else str(name)
    except drl.DeviceError as error:
        return None, str(error)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default="16,64,256,1024")
    parser.add_argument("--batches", default="1,16,256,4096")
    parser.add_argument("--block", type=int, default=0, help="threads of a fused CUDA step's block (0: default)")
    args = parser.parse_args()
    widths = [int(w) for w in args.widths.split(",")]
    batches = [int(b) for b in args.batches.split(",")]
    gpu, gpu_name = gpu_device()
    devices = [("cpu", drl.CPU(), lambda: None)]
    if gpu is not None:
        from numba import cuda

        devices.append(("cuda", gpu, cuda.synchronize))
        if args.block:
            from dispatchrl.backends import cuda as cuda_backend

            cuda_backend.FUSED_BLOCK = args.block
    else:
        print(json.dumps({"benchmark": "cpu_vs_gpu", "cuda": "skipped", "reason": gpu_name}), flush=True)
    for name, device, synchronize in devices:
        step = make_demo_step(device)
        record = {"benchmark": "demo_mlp_step", "device": name}
        if name == "cuda":
            record.update(gpu=gpu_name, program=program_kind(step))
        record["microseconds"] = round(seconds_per_step(device, step, synchronize) * 1e6, 2)
        print(json.dumps(record), flush=True)
    results = {}
    for width in widths:
        for batch in batches:
            for name, device, synchronize in devices:
                step = make_step(device, width, batch)
                seconds = seconds_per_step(device, step, synchronize)
                results[name, width, batch] = seconds
                flops = 6 * batch * width * width  # forward, weight and input gradients
                record = {"benchmark": "cpu_vs_gpu", "device": name, "width": width, "batch": batch}
                if name == "cuda":
                    record["program"] = program_kind(step)
                record.update(microseconds=round(seconds * 1e6, 2), gflops=round(flops / seconds / 1e9, 2))
                print(json.dumps(record), flush=True)
    header = "width\\batch " + "".join(f"{b:>10}" for b in batches)
    print("\nCPU µs per dense forward+backward" + ("  |  CPU time / CUDA time" if gpu else ""), file=sys.stderr)
    print(header, file=sys.stderr)
    for width in widths:
        cells = []
        for batch in batches:
            cpu = results["cpu", width, batch]
            cells.append(f"{cpu / results['cuda', width, batch]:>9.2f}x" if gpu else f"{cpu * 1e6:>10.1f}")
        print(f"{width:>11} " + "".join(cells), file=sys.stderr)
    if gpu:
        for width in widths:
            wins = [b for b in batches if results["cuda", width, b] < results["cpu", width, b]]
            print(
                json.dumps(
                    {
                        "benchmark": "cpu_vs_gpu",
                        "width": width,
                        "gpu": gpu_name,
                        "crossover_batch": wins[0] if wins else None,
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
