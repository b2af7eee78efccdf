"""Dense layer forward+backward and the demo step on CPU vs CUDA, against JAX and PyTorch.

The step (dense_forward then dense_backward with input gradient, width×width, relu) is written
once and fused per device. First it times the ``dispatchrl demo`` step (MLP 4-64-64-1, batch 100,
MSE + Adam) per device and reports its loss after ``--demo-steps`` steps; then the dense layer per
(device, width, batch), in TFLOP/s of its 3 GEMMs (6·batch·width² FLOPs); then the peers
(``benchmarks/gpu_peers.py``: JAX ``jit(lax.scan)``, PyTorch eager and CUDA graph), each in its own
subprocess, on the same demo (same initial weights and data, so the final losses compare) and on
the dense shapes of ``--peer-shapes``. Every row is one JSON line:
``{"bench": "demo_step"|"dense_fwd_bwd", "impl": "dispatchrl-cpu"|"dispatchrl-cuda"|"jax-gpu"|
"torch-gpu"|..., "device": <CPU or GPU name>, "us_per_step", "tflops", "repeats", ...}``; a peer
that cannot be imported or fails gives a row saying so. A CUDA row says which program the step
compiled to: "single-block" (one kernel launch per step(n)) or "launches" (the per-kernel loop).
Without a GPU, or under NUMBA_ENABLE_CUDASIM (whose timings mean nothing), the dispatchrl CUDA
rows are skipped with a row saying why. A CPU/CUDA ratio table goes to stderr.

    python benchmarks/cpu_vs_gpu.py [--widths 16,64,256,1024] [--batches 1,16,256,4096] [--block 256]
        [--peers jax,torch|none] [--peer-shapes 1024x4096] [--demo-steps 2000] [--repeats 5]
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numba
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
    """The ``dispatchrl demo`` step (:func:`dispatchrl.nn.regression_demo`): MLP 4-64-64-1
    regression, MSE + Adam. Returns the fused step, the net, the loss array and the host data (x, y)."""
    return nn.regression_demo(device, batch)


def demo_weights(net, data) -> dict[str, np.ndarray]:
    """The demo's initial weights and data for the peers (W0, b0, W1, b1, W2, b2, x, y)."""
    arrays = {}
    for i, (w, b) in enumerate(zip(net.weights, net.biases)):
        arrays[f"W{i}"] = np.array(drl.to_numpy(w.value), np.float32)
        arrays[f"b{i}"] = np.array(drl.to_numpy(b.value), np.float32)
    arrays["x"], arrays["y"] = data
    return arrays


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


def gpu_device(simulator=False):
    """(the CUDA device, its name), or (None, why not). Under NUMBA_ENABLE_CUDASIM only with
    ``simulator``, whose rows are then marked ``"simulated": true``."""
    simulated = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
    if simulated and not simulator:
        return None, "NUMBA_ENABLE_CUDASIM=1: simulator timings are meaningless (--simulator runs them anyway)"
    try:
        from numba import cuda

        device = drl.CUDA()
        if simulated:
            return device, "numba CUDA simulator"
        name = cuda.get_current_device().name
        return device, name.decode() if isinstance(name, bytes) else str(name)
    except drl.DeviceError as error:
        return None, str(error)


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return f"{line.split(':', 1)[1].strip()} ({os.cpu_count()} threads)"
    except OSError:
        pass
    return platform.processor() or platform.machine()


def emit(record) -> None:
    print(json.dumps(record), flush=True)


def run_peers(python, peers, weights_path, demo_steps, shapes, repeats, timeout) -> None:
    """Each peer in its own subprocess, its JSON lines passed on as they come; a peer that times
    out or dies gives one row saying so."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu_peers.py")
    for peer in peers:
        command = [python, script, "--impl", peer, "--weights", weights_path]
        command += ["--steps", str(demo_steps), "--shapes", shapes, "--repeats", str(repeats)]
        with tempfile.TemporaryFile("w+") as stderr:
            process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True)
            timer = threading.Timer(timeout, process.kill)
            timer.start()
            assert process.stdout is not None
            for line in process.stdout:
                print(line, end="", flush=True)
            code = process.wait()
            timed_out = not timer.is_alive()
            timer.cancel()
            stderr.seek(0)
            tail = stderr.read()[-2000:]
        if timed_out:
            emit({"bench": "peer", "impl": peer, "failed": f"killed after {timeout} s", "stderr": tail})
        elif code != 0:
            emit({"bench": "peer", "impl": peer, "failed": f"exit {code}", "stderr": tail})


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default="16,64,256,1024")
    parser.add_argument("--batches", default="1,16,256,4096")
    parser.add_argument("--block", type=int, default=0, help="threads of a fused CUDA step's block (0: default)")
    parser.add_argument("--peers", default="jax,torch", help="comma-separated among jax, torch; 'none' for none")
    parser.add_argument("--peer-shapes", default="1024x4096", help="the peers' dense layers, WIDTHxBATCH,...")
    parser.add_argument("--peer-python", default=sys.executable, help="the Python that has jax/torch (default: this)")
    parser.add_argument("--peer-timeout", type=float, default=150, help="seconds per peer subprocess")
    parser.add_argument("--demo-steps", type=int, default=2000, help="steps to the demo's final_loss (at least 2)")
    parser.add_argument("--repeats", type=int, default=5, help="timings per row (the median is reported)")
    parser.add_argument("--no-demo", action="store_true", help="skip the demo step rows")
    parser.add_argument(
        "--simulator",
        action="store_true",
        help="under NUMBA_ENABLE_CUDASIM=1 run the CUDA rows anyway, marked simulated (checks the code path only)",
    )
    args = parser.parse_args()
    widths = [int(w) for w in args.widths.split(",") if w]
    batches = [int(b) for b in args.batches.split(",") if b]
    peers = [p for p in args.peers.split(",") if p and p != "none"]
    unknown = sorted(set(peers) - {"jax", "torch"})
    if unknown:
        parser.error(f"--peers: unknown {unknown}; expected a comma-separated list among jax, torch, or none")
    if args.demo_steps < 2:
        parser.error(f"--demo-steps: expected at least 2, got {args.demo_steps}")
    gpu, gpu_name = gpu_device(args.simulator)
    simulated = {"simulated": True} if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" else {}
    devices = [("cpu", drl.CPU(), lambda: None, cpu_name())]
    if gpu is not None:
        from numba import cuda

        devices.append(("cuda", gpu, cuda.synchronize, gpu_name))
        if args.block:
            from dispatchrl.backends import cuda as cuda_backend

            cuda_backend.FUSED_BLOCK = args.block
    else:
        emit({"bench": "all", "impl": "dispatchrl-cuda", "skipped": gpu_name})
    common = {"numba": numba.__version__, "numpy": np.__version__}
    if peers:  # first, so that a dispatchrl kernel that brings the process down costs no peer rows
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "demo.npz")
            _, net, _, data = make_demo_step(drl.CPU())  # the initial weights: the same on every device
            np.savez(path, **demo_weights(net, data))
            run_peers(args.peer_python, peers, path, args.demo_steps, args.peer_shapes, args.repeats, args.peer_timeout)
    if not args.no_demo:
        for name, device, synchronize, device_name in devices:
            record = {"bench": "demo_step", "impl": f"dispatchrl-{name}", "device": device_name}
            record["mode"] = "fused step(n)"
            try:
                step, net, loss, data = make_demo_step(device)
                if name == "cuda":
                    record.update(program=program_kind(step), **simulated)
                    record["block"] = args.block or None
                # also the warm-up: from the initial weights, as `dispatchrl demo`
                step(1)
                first_loss = float(drl.to_numpy(loss)[0])
                step(args.demo_steps - 1)
                final_loss = float(drl.to_numpy(loss)[0])
                seconds = seconds_per_step(device, step, synchronize, repeats=args.repeats)
            except Exception as error:  # a row of its own, and the other rows still run
                emit(record | {"failed": repr(error)} | common)
                continue
            record.update(
                us_per_step=round(seconds * 1e6, 2),
                repeats=args.repeats,
                first_loss=float(f"{first_loss:.6g}"),
                final_loss=float(f"{final_loss:.6g}"),
            )
            emit(record | common)
    results = {}
    for width in widths:
        for batch in batches:
            for name, device, synchronize, device_name in devices:
                flops = 6 * batch * width * width  # forward, weight and input gradients: 3 GEMMs
                record = {"bench": "dense_fwd_bwd", "impl": f"dispatchrl-{name}", "device": device_name}
                record.update(width=width, batch=batch, precision="fp32")
                try:
                    step = make_step(device, width, batch)
                    if name == "cuda":
                        record.update(program=program_kind(step), **simulated)
                    seconds = seconds_per_step(device, step, synchronize, repeats=args.repeats)
                except Exception as error:
                    emit(record | {"failed": repr(error)} | common)
                    continue
                results[name, width, batch] = seconds
                record.update(
                    us_per_step=round(seconds * 1e6, 2), tflops=round(flops / seconds / 1e12, 4), repeats=args.repeats
                )
                emit(record | common)
    if not results:
        return
    gpu_rows = gpu is not None and any(key[0] == "cuda" for key in results)
    print("\nCPU µs per dense forward+backward" + ("  |  CPU time / CUDA time" if gpu_rows else ""), file=sys.stderr)
    print("width\\batch " + "".join(f"{b:>10}" for b in batches), file=sys.stderr)
    for width in widths:
        cells = []
        for batch in batches:
            cpu, cuda_time = results.get(("cpu", width, batch)), results.get(("cuda", width, batch))
            if gpu_rows:
                cells.append(f"{cpu / cuda_time:>9.2f}x" if cpu and cuda_time else f"{'-':>10}")
            else:
                cells.append(f"{cpu * 1e6:>10.1f}" if cpu else f"{'-':>10}")
        print(f"{width:>11} " + "".join(cells), file=sys.stderr)
    if gpu_rows:
        for width in widths:
            wins = [b for b in batches if results.get(("cuda", width, b), np.inf) < results.get(("cpu", width, b), 0)]
            emit(
                {
                    "bench": "crossover",
                    "impl": "dispatchrl-cuda",
                    "device": gpu_name,
                    "width": width,
                    "crossover_batch": wins[0] if wins else None,
                }
            )


if __name__ == "__main__":
    main()
