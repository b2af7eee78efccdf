"""The exported trainer on every target: one JSON line per target.

- host and wasm32-wasi (Node): wall seconds of a full TD3 Pendulum run (--steps, default 10k);
- browser: the same run in the web page (export-trainer --target web) in headless Chromium, against
  the native host trainer in alternating pairs (same config and seed: same checksum);
- aarch64/armhf/riscv64-linux under qemu-user and cortex-m7 under qemu-system-arm: a shorter run
  (--emulated-steps), labelled "emulated" (emulation speed, not the hardware's);
- cortex-m7 memory: text + data + bss of the ELF for TD3 and SAC at several replay capacities;
- train --device c over --device cpu, the same config in the same process run.

Usage: python benchmarks/trainer.py [--steps 10000] [--emulated-steps 1000] [--skip-ratio] [--browser-pairs 3]
"""

import argparse
import json
import platform
import shutil
import tempfile
from pathlib import Path

from dispatchrl.export.trainer import trainer_source, write_trainer
from dispatchrl.export.trainer_targets import build_trainer, elf_size, run_trainer


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def browser_row(folder: Path, steps: int, machine: str, pairs: int = 3) -> None:
    """Wall seconds of the page's run in headless Chromium over the native host trainer's: ``pairs``
    alternating runs (native, then browser), medians; the ratio is the median of the pairs' ratios."""
    try:
        import playwright  # noqa: F401
    except ImportError:
        print(json.dumps({"target": "browser", "skipped": "pip install playwright"}), flush=True)
        return
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        print(json.dumps({"target": "browser", "skipped": "chromium not installed"}), flush=True)
        return
    from statistics import median

    from dispatchrl.export.web import browser_run, build_web

    build_web(folder, "td3", "pendulum", steps, 0)
    host = build_trainer(folder, "host")
    native, browser = [], []
    for _ in range(pairs):
        native.append(run_trainer(host, "host", steps=steps, seed=0))
        browser.append(browser_run(folder, steps, 0))
    print(
        json.dumps(
            {
                "target": "browser",
                "algo": "td3",
                "steps": browser[0]["steps"],
                "pairs": pairs,
                "browser_seconds": round(median(b["seconds"] for b in browser), 3),
                "native_seconds": round(median(n["train_seconds"] for n in native), 3),
                "ratio": round(median(b["seconds"] / n["train_seconds"] for b, n in zip(browser, native)), 2),
                "goal": 2.0,
                "same_checksum": all(b["checksum"] == n["checksum"] for b, n in zip(browser, native)),
                "checksum": browser[0]["checksum"],
                "machine": machine,
            }
        ),
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--emulated-steps", type=int, default=1000)
    parser.add_argument("--skip-ratio", action="store_true")
    parser.add_argument("--browser-pairs", type=int, default=3, help="native/browser run pairs (medians)")
    args = parser.parse_args()
    machine = cpu_model()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "td3"
        write_trainer(out, trainer_source("td3", "pendulum", args.steps, 0))
        for target in ("host", "wasm32-wasi"):
            if target == "wasm32-wasi" and not shutil.which("node"):
                print(json.dumps({"target": target, "skipped": "node not installed"}), flush=True)
                continue
            run = run_trainer(build_trainer(out, target), target, steps=args.steps, seed=0)
            print(
                json.dumps(
                    {
                        "target": target,
                        "algo": "td3",
                        "steps": run["steps"],
                        "train_seconds": run["train_seconds"],
                        "eval_return": run["eval_return"],
                        "checksum": run["checksum"],
                        "machine": machine,
                    }
                ),
                flush=True,
            )
        browser_row(out.parent / "web", args.steps, machine, args.browser_pairs)
        for target, tool in (
            ("aarch64-linux", "qemu-aarch64"),
            ("armhf-linux", "qemu-arm"),
            ("riscv64-linux", "qemu-riscv64"),
            ("cortex-m7", "qemu-system-arm"),
        ):
            if not shutil.which(tool):
                print(json.dumps({"target": target, "skipped": f"{tool} not installed"}), flush=True)
                continue
            steps = args.emulated_steps
            path = build_trainer(out, target, steps=steps, seed=0)
            run = run_trainer(path, target, steps=None if target == "cortex-m7" else steps, seed=0)
            print(
                json.dumps(
                    {
                        "target": target,
                        "emulated": True,
                        "algo": "td3",
                        "steps": run["steps"],
                        "train_seconds": run["train_seconds"],
                        "checksum": run["checksum"],
                        "machine": machine,
                    }
                ),
                flush=True,
            )
        for algo in ("td3", "sac"):
            for capacity in (10_000, 5000, 2000, 1000):
                d = Path(tmp) / f"{algo}-{capacity}"
                trainer = trainer_source(algo, "pendulum", args.steps, 0, {"replay_capacity": capacity})
                write_trainer(d, trainer)
                size = elf_size(build_trainer(d, "cortex-m7", steps=args.steps))
                print(
                    json.dumps(
                        {
                            "target": "cortex-m7",
                            "memory": True,
                            "algo": algo,
                            "steps": args.steps,
                            "replay_capacity": capacity,
                            "state_bytes": trainer.state_bytes,
                            **size,
                            "fits_1MiB": size["total"] <= 1 << 20,
                        }
                    ),
                    flush=True,
                )
    if not args.skip_ratio:
        import dispatchrl as drl
        from dispatchrl.algorithms import td3

        seconds = {}
        for device in (drl.CPU(), drl.C(), drl.CPU(), drl.C()):  # the second pair is timed (compiled, warm)
            result = td3.train(device, "pendulum", td3.Config(total_steps=args.steps), seed=0)
            seconds[type(device).__name__.lower()] = result.train_seconds
        print(
            json.dumps(
                {
                    "target": "train --device c / --device cpu",
                    "algo": "td3",
                    "steps": args.steps,
                    "c_seconds": round(seconds["c"], 3),
                    "cpu_seconds": round(seconds["cpu"], 3),
                    "ratio": round(seconds["c"] / seconds["cpu"], 2),
                    "goal": 1.3,
                    "machine": machine,
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
