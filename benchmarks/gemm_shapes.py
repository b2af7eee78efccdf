"""TD3's matrix products alone: OpenBLAS against the register-tiled float32 kernels (issue 20).

Every product shape of a TD3 Pendulum step (batch 100, hidden (64, 64); actor 3→64→64→1, twin
critics 4→64→64→1 and their targets), with how often it runs per env step, as
``benchmarks/step_breakdown.py --algo td3`` counted them (9,900 learning steps and 4,950 actor /
target updates per 10k env steps). Each product is timed the way the dense kernels call it, from
an ``@njit`` function on 64-byte aligned arrays:

- openblas: ``np.dot(a, b, out)`` (OpenBLAS sgemm); for the input gradient d·Wᵀ as
  ``_input_gradient_blas`` does on this machine (NT directly where the BLAS core type is Haswell
  or Zen, else with the Wᵀ copy);
- custom: ``cpu_gemm.matmul_tiled`` (``<8 x float>`` register tiles via Numba intrinsics;
  ``<16 x float>`` NN tiles where Numba's target has AVX-512), for
  d·Wᵀ with the Wᵀ copy (``transpose_tiled``) included in its time where it takes that path;
- loop: the plain Numba loops of ``kernels/core/cpu.py`` (``matmul_loop``,
  ``_input_gradient_loop``): what LLVM's vectoriser makes of loops.

Kinds: NN c = a·b (forward x·W), TN c = aᵀ·b (weight gradient xᵀ·d), NT c = a·bᵀ (input gradient
d·Wᵀ). Timings are medians over ``--pairs`` alternating samples (openblas, custom, loop, order
rotated each pair; each sample the mean of ``--calls`` calls): the machine may be shared.
Errors are max |c − c64| against a float64 numpy product of the same float32 inputs.

Prints JSON lines: "machine", one "shape" per product, "total" (µs per env step of all products
per implementation and their ratio).

    python benchmarks/gemm_shapes.py [--pairs 15] [--calls 400] [--seed 0]
"""

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import njit

from dispatchrl.arrays import ALIGNMENT
from dispatchrl.backends.cpu import JIT_FAST
from dispatchrl.kernels.core import cpu as cpu_kernels
from dispatchrl.kernels.core.cpu_gemm import matmul_tiled

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from step_breakdown import machine

__all__ = ["SHAPES", "main"]

#: (kind, m, k, n, executions per env step) of c(m, n) = a(m, k)·b(k, n); from step_breakdown.py
#: --algo td3 (2026-11-23): 0.99 per learning step, 0.495 per actor/target update
SHAPES: list[tuple[str, int, int, int, float]] = [
    ("NN", 100, 3, 64, 1.485),  # actor first layer (target actor in the critic update, actor update)
    ("NN", 100, 4, 64, 4.455),  # critics' first layers
    ("NN", 100, 64, 64, 5.94),  # hidden layers
    ("NN", 100, 64, 1, 5.94),  # output layers
    ("NN", 1, 64, 64, 0.99),  # acting: the actor's hidden layer on one observation
    ("TN", 64, 100, 64, 2.475),  # weight gradient of the hidden layers
    ("TN", 64, 100, 1, 2.475),  # weight gradient of the output layers
    ("TN", 4, 100, 64, 1.98),  # critics' first-layer weight gradients
    ("TN", 3, 100, 64, 0.495),  # actor's first-layer weight gradient
    ("NT", 100, 64, 64, 2.97),  # input gradient through the hidden layers
    ("NT", 100, 1, 64, 2.97),  # input gradient through the output layers
    ("NT", 100, 64, 4, 0.495),  # the critic's action gradient (through its first layer)
]


def aligned(x: np.ndarray) -> np.ndarray:
    raw = np.empty(x.nbytes + ALIGNMENT, dtype=np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    out = raw[start : start + x.nbytes].view(x.dtype).reshape(x.shape)
    out[...] = x
    return out


def _repeated(kernel: Callable[..., None]) -> Callable[..., None]:
    """``kernel(*args)`` called ``n`` times from one @njit loop, as the dense kernels call it."""

    @njit(**JIT_FAST)
    def repeat(n, *args):
        for _ in range(n):
            kernel(*args)

    return repeat


#: per kind, the products as each implementation runs them (TN takes xᵀ as the dense kernels pass it)
KERNELS = {
    "NN": {"openblas": cpu_kernels.matmul_blas, "custom": matmul_tiled, "loop": cpu_kernels.matmul_loop},
    "TN": {"openblas": cpu_kernels.matmul_blas, "custom": matmul_tiled, "loop": cpu_kernels.matmul_loop},
    "NT": {
        "openblas": cpu_kernels._input_gradient_blas,
        "custom": cpu_kernels._input_gradient_tiled,
        "loop": cpu_kernels._input_gradient_loop,
    },
}


def _wt_scratch(w: np.ndarray, tiled: bool) -> np.ndarray:
    """The Wᵀ scratch the kernels would get (a (1, 1) placeholder where they use none)."""
    if tiled:
        wide = w.shape[0] % 8 == 0 and w.shape[1] > 1
    else:
        wide = w.shape[0] >= 16 and cpu_kernels._transposed_copy_pays()
    return aligned(np.zeros(w.shape[::-1] if wide else (1, 1), np.float32))


def problem(kind: str, m: int, k: int, n: int, rng: np.random.Generator) -> dict[str, Any]:
    """Operands as the dense kernels hold them, calls per implementation, and the float64 reference."""
    f32 = np.float32
    if kind == "NN":  # x (m, k) · W (k, n)
        a, b = aligned(rng.standard_normal((m, k)).astype(f32)), aligned(rng.standard_normal((k, n)).astype(f32))
        out = aligned(np.zeros((m, n), f32))
        ref = a.astype(np.float64) @ b.astype(np.float64)
        args = dict.fromkeys(KERNELS[kind], (a, b, out))
    elif kind == "TN":  # dW (m, n) = xᵀ · d with x (k, m), d (k, n)
        x, d = aligned(rng.standard_normal((k, m)).astype(f32)), aligned(rng.standard_normal((k, n)).astype(f32))
        out = aligned(np.zeros((m, n), f32))
        ref = x.astype(np.float64).T @ d.astype(np.float64)
        args = dict.fromkeys(KERNELS[kind], (x.T, d, out))
    else:  # NT: dX (m, n) = d (m, k) · Wᵀ with W (n, k)
        d, w = aligned(rng.standard_normal((m, k)).astype(f32)), aligned(rng.standard_normal((n, k)).astype(f32))
        out = aligned(np.zeros((m, n), f32))
        ref = d.astype(np.float64) @ w.astype(np.float64).T
        args = {
            "openblas": (d, w, _wt_scratch(w, False), out),
            "custom": (d, w, _wt_scratch(w, True), out),
            "loop": (d, w, out),
        }
    calls = {name: (_repeated(KERNELS[kind][name]), args[name]) for name in args}
    return {"out": out, "ref": ref, "calls": calls}


def _sample(fn: Callable[..., None], args: tuple, calls: int) -> float:
    start = time.perf_counter()
    fn(calls, *args)
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=15, help="alternating samples per implementation")
    parser.add_argument("--calls", type=int, default=400, help="calls per sample")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    emit = lambda record: print(json.dumps(record), flush=True)  # noqa: E731
    emit({"record": "machine", "loadavg": list(os.getloadavg()), **machine()})
    names = ("openblas", "custom", "loop")
    totals = dict.fromkeys(names, 0.0)
    flop_total = 0.0
    for kind, m, k, n, per_step in SHAPES:
        prob = problem(kind, m, k, n, rng)
        errors = {}
        for name in names:
            fn, fargs = prob["calls"][name]
            prob["out"][...] = np.nan
            fn(1, *fargs)  # compile and check
            errors[name] = float(np.abs(prob["out"] - prob["ref"]).max())
        samples: dict[str, list[float]] = {name: [] for name in names}
        for pair in range(args.pairs):
            order = names[pair % 3 :] + names[: pair % 3]
            for name in order:
                fn, fargs = prob["calls"][name]
                samples[name].append(_sample(fn, fargs, args.calls))
        flops = 2 * m * k * n
        med = {name: statistics.median(samples[name]) for name in names}
        record: dict[str, Any] = {"record": "shape", "kind": kind, "m": m, "k": k, "n": n, "per_env_step": per_step}
        for name in names:
            record[f"{name}_us"] = round(med[name], 3)
            record[f"{name}_min_us"] = round(min(samples[name]), 3)
            record[f"{name}_gflops"] = round(flops / med[name] / 1e3, 1)
            record[f"{name}_max_abs_err"] = errors[name]
            totals[name] += med[name] * per_step
        record["ratio_custom_openblas"] = round(med["custom"] / med["openblas"], 3)
        flop_total += flops * per_step
        emit(record)
    emit(
        {
            "record": "total",
            "gemm_mflop_per_env_step": round(flop_total / 1e6, 3),
            **{f"{name}_us_per_env_step": round(totals[name], 2) for name in names},
            **{f"{name}_gflops": round(flop_total / totals[name] / 1e3, 1) for name in names},
            "ratio_custom_openblas": round(totals["custom"] / totals["openblas"], 3),
            "loadavg_after": list(os.getloadavg()),
        }
    )


if __name__ == "__main__":
    main()
