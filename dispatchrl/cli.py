"""The ``dispatchrl`` command line."""

import argparse
import json
import sys
import time

import numpy as np


def available_devices():
    """Generic and CPU always; CUDA when a GPU (or the simulator) is usable."""
    import dispatchrl as drl

    devices = [drl.Generic(), drl.CPU()]
    try:
        devices.append(drl.CUDA())
    except drl.DeviceError:
        pass
    return devices


def demo(args):
    """Train one small MLP regression, written once, fused on every available device."""
    import dispatchrl as drl
    from dispatchrl import nn

    g = np.random.default_rng(0)
    x = g.uniform(-2, 2, size=(args.batch, 4))
    y = np.sin(x).sum(axis=1, keepdims=True)
    results = []
    for device in available_devices():
        net = nn.mlp(device, (4, 64, 64, 1), activation="relu", seed=0)
        buffers = nn.mlp_buffers(device, net, args.batch)
        loss = drl.zeros(device, 1)
        start = time.perf_counter()
        step = drl.fuse(device, nn.mlp_train_step, net, buffers, drl.asarray(device, x, np.float32),
                        drl.asarray(device, y, np.float32), loss)
        step(1)
        first = float(drl.to_numpy(loss)[0])
        build = time.perf_counter() - start
        start = time.perf_counter()
        step(args.steps - 1)
        seconds = time.perf_counter() - start
        record = {"device": repr(device), "steps": args.steps, "first_loss": round(first, 4),
                  "final_loss": round(float(drl.to_numpy(loss)[0]), 5), "build_seconds": round(build, 3),
                  "microseconds_per_step": round(seconds / max(args.steps - 1, 1) * 1e6, 2)}
        results.append(record)
        print(json.dumps(record) if args.json else
              f"{record['device']:>10}: loss {first:.4f} -> {record['final_loss']:.5f} in {args.steps} fused "
              f"steps, {record['microseconds_per_step']:.1f} µs/step (built in {build:.2f} s)", flush=True)
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(prog="dispatchrl", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("demo", help="run one MLP training step, written once, on every available device")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--json", action="store_true", help="one JSON object per device")
    p.set_defaults(run=demo)
    args = parser.parse_args(argv)
    args.run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
