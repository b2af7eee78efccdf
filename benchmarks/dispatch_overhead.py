"""Per-call cost of plum dispatch vs a direct njit call vs one fused step, an eager 2×2 matmul
(issue 34's target: ≤ 5 µs), and the fused 100×64→64→1 MLP train step vs the same step's matrix
products alone done by BLAS (skipped with --dispatch-only).

Prints JSON lines. Every comparison is measured in the same run, as medians of repeated timings.
"""

import json
import os
import statistics
import sys
import time

import numpy as np
from numba import njit

import dispatchrl as drl
from dispatchrl import nn
from dispatchrl.dispatch import check_aliasing
from dispatchrl.kernels.core import cpu as cpu_kernels


def per_call(fn, calls, repeats=7):
    """Median seconds per call of fn() over `repeats` timings of `calls` calls."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times)


def emit(**record):
    print(json.dumps(record), flush=True)


def dispatch_costs():
    dev = drl.CPU()
    x, out = drl.zeros(dev, (4, 4)), drl.zeros(dev, (4, 4))
    raw_x, raw_out = x.data, out.data
    relu_code = int(drl.Activation.RELU)
    method = drl.relu.resolve(dev, x, out)
    step = drl.fuse(dev, lambda d: drl.relu(d, x, out))
    n = 20000
    cost = {
        "generic_function_call": per_call(lambda: drl.relu(dev, x, out), n),
        "plum_method_call": per_call(lambda: drl.relu.function(dev, x, out), n),
        "resolved_method_call": per_call(lambda: method(dev, x, out), n),
        "direct_njit_call": per_call(lambda: cpu_kernels.activation_kernel(raw_x, raw_out, relu_code), n),
        "fused_step_call": per_call(step, n),
        # part of generic_function_call: the overlap check of its outputs (fused steps skip it)
        "alias_check": per_call(lambda: check_aliasing(drl.relu, (dev, x, out)), n),
    }
    for name, seconds in cost.items():
        emit(
            benchmark="dispatch_overhead",
            what=name,
            shape=[4, 4],
            microseconds=round(seconds * 1e6, 3),
            ratio_vs_direct_njit=round(seconds / cost["direct_njit_call"], 2),
        )
    # an eager product, as a new user's first call would be (the checks are remembered per kind of call)
    a, b, product = drl.zeros(dev, (2, 2)), drl.zeros(dev, (2, 2)), drl.zeros(dev, (2, 2))
    drl.matmul(dev, a, b, product)
    generic = per_call(lambda: drl.matmul(dev, a, b, product), n)
    direct = per_call(lambda: cpu_kernels.matmul_loop(a.data, b.data, product.data), n)
    emit(
        benchmark="dispatch_overhead",
        what="generic_matmul_call",
        shape=[2, 2],
        microseconds=round(generic * 1e6, 3),
        direct_njit_microseconds=round(direct * 1e6, 3),
        target_microseconds=5.0,
        load_average_1min=round(os.getloadavg()[0], 2),
    )


@njit(cache=True, nogil=True)
def blas_products_only(n, x, W1, h, W2, y, d_y, d_h, dW1, dW2):
    """The five matrix products of one MLP train step, nothing else."""
    for _ in range(n):
        np.dot(x, W1, h)  # layer 1 forward
        np.dot(h, W2, y)  # layer 2 forward
        np.dot(h.T, d_y, dW2)  # layer 2 weight gradient
        np.dot(d_y, W2.T, d_h)  # layer 2 input gradient
        np.dot(x.T, d_h, dW1)  # layer 1 weight gradient


def mlp_step_vs_blas(batch=100, sizes=(64, 64, 1), steps_per_call=1000, pairs=7):
    dev = drl.CPU()
    g = np.random.default_rng(0)
    net = nn.mlp(dev, sizes, activation="relu", seed=0)
    buffers = nn.mlp_buffers(dev, net, batch)
    x = drl.asarray(dev, g.normal(size=(batch, sizes[0])), np.float32)
    y = drl.asarray(dev, g.normal(size=(batch, sizes[-1])), np.float32)
    loss = drl.zeros(dev, 1)
    step = drl.fuse(dev, nn.mlp_train_step, net, buffers, x, y, loss)
    f32 = lambda *s: g.normal(size=s).astype(np.float32)  # noqa: E731
    products = (
        f32(batch, sizes[0]),
        f32(sizes[0], sizes[1]),
        f32(batch, sizes[1]),
        f32(sizes[1], sizes[2]),
        f32(batch, sizes[2]),
        f32(batch, sizes[2]),
        f32(batch, sizes[1]),
        f32(sizes[0], sizes[1]),
        f32(sizes[1], sizes[2]),
    )
    blas_products_only(1, *products)
    step(10)
    fused, blas = [], []
    for _ in range(pairs):  # alternate, so both see the same machine load
        start = time.perf_counter()
        step(steps_per_call)
        fused.append((time.perf_counter() - start) / steps_per_call)
        start = time.perf_counter()
        blas_products_only(steps_per_call, *products)
        blas.append((time.perf_counter() - start) / steps_per_call)
    ratio = statistics.median(f / b for f, b in zip(fused, blas))
    emit(
        benchmark="mlp_train_step",
        network=f"{batch}x{sizes[0]}->{sizes[1]}->{sizes[2]}",
        fused_step_microseconds=round(statistics.median(fused) * 1e6, 2),
        blas_products_only_microseconds=round(statistics.median(blas) * 1e6, 2),
        ratio_fused_vs_blas_products=round(ratio, 3),
        target_ratio=2.0,
        meets_target=ratio <= 2.0,
        compile_seconds=round(step.compile_seconds, 2),
    )


if __name__ == "__main__":
    dispatch_costs()
    if "--dispatch-only" not in sys.argv[1:]:
        mlp_step_vs_blas()
