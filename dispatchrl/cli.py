"""The ``dispatchrl`` command line: train, eval, export, demo."""

import argparse
import dataclasses
import json
import sys
import time
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from dispatchrl.devices import Device


def available_devices() -> list["Device"]:
    """Generic and CPU always; CUDA when a GPU (or the simulator) is usable."""
    import dispatchrl as drl

    devices: list[drl.Device] = [drl.Generic(), drl.CPU()]
    try:
        devices.append(drl.CUDA())
    except drl.DeviceError:
        pass
    return devices


def demo(args: argparse.Namespace) -> None:
    """Train one small MLP regression, written once, fused on every available device."""
    import dispatchrl as drl
    from dispatchrl import nn

    g = np.random.default_rng(0)
    x = g.uniform(-2, 2, size=(args.batch, 4))
    y = np.sin(x).sum(axis=1, keepdims=True)
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
        print(json.dumps(record) if args.json else
              f"{record['device']:>10}: loss {first:.4f} -> {record['final_loss']:.5f} in {args.steps} fused "
              f"steps, {record['microseconds_per_step']:.1f} µs/step (built in {build:.2f} s)", flush=True)


def _parse_overrides(config: Any, pairs: list[str]) -> Any:
    """``--set key=value`` (JSON values; lists become tuples) onto a config dataclass."""
    from dispatchrl import ConfigError

    names = {f.name for f in dataclasses.fields(config)}
    changes = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or key not in names:
            raise ConfigError(f"--set {pair!r}: expected key=value with key one of {sorted(names)}")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        changes[key] = tuple(value) if isinstance(value, list) else value
    return dataclasses.replace(config, **changes)


def train(args: argparse.Namespace) -> dict:
    from dispatchrl.algorithms import ALGORITHMS, evaluate
    from dispatchrl.devices import device_from_name

    algo = ALGORITHMS[args.algo]
    config = algo.config_for(args.env)  # PPO's budget and hyperparameters depend on the env
    if args.steps is not None:
        config = dataclasses.replace(config, total_steps=args.steps)
    if args.num_envs is not None:
        config = dataclasses.replace(config, num_envs=args.num_envs)
    config = _parse_overrides(config, args.set or [])
    config.validate()
    device = device_from_name(args.device)
    result = algo.train(device, args.env, config, seed=args.seed, progress=None if not args.json else False,
                        resume=args.resume)
    if args.save:
        result.save(args.save)
    eval_return, eval_returns = (None, []) if args.no_eval else evaluate(result.policy, result.spec.eval_id)
    summary = {**result.summary(), "eval_return": None if eval_return is None else round(eval_return, 3),
               "eval_returns": [round(r, 3) for r in eval_returns], "saved": str(args.save) if args.save else None}
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"{summary['algo']} on {summary['env']} ({summary['device']}): {summary['steps']} steps in "
              f"{summary['train_seconds']:.2f} s (+{summary['compile_seconds']:.2f} s compile)"
              + ("" if eval_return is None else f", evaluation return {eval_return:.1f} over {len(eval_returns)} episodes")
              + (f"; saved {args.save}" if args.save else ""))
    return summary


def evaluate(args: argparse.Namespace) -> dict:
    from dispatchrl.algorithms import ALGORITHMS, EVAL_SEEDS, load_run
    from dispatchrl.algorithms import evaluate as evaluate_policy

    algo, name, spec, _, state = load_run(args.checkpoint, ALGORITHMS)
    policy = algo.policy(state, spec.action_low, spec.action_high)
    seeds = tuple(range(args.seed, args.seed + args.episodes)) if args.seed is not None else EVAL_SEEDS[:args.episodes]
    mean, returns = evaluate_policy(policy, spec.eval_id, seeds)
    summary = {"algo": name, "env": spec.name, "checkpoint": str(args.checkpoint), "episodes": len(returns),
               "eval_return": round(mean, 3), "eval_returns": [round(r, 3) for r in returns]}
    print(json.dumps(summary) if args.json else f"{name} on {spec.name}: mean return {mean:.1f} over {len(returns)} episodes")
    return summary


def export(args: argparse.Namespace) -> dict:
    from dispatchrl import export as c_export
    from dispatchrl.algorithms import ALGORITHMS, load_run

    algo, _, spec, _, state = load_run(args.checkpoint, ALGORITHMS)
    policy = algo.policy(state, spec.action_low, spec.action_high)
    written = c_export.write_policy(policy, args.out, target=args.target, name=args.name)
    for kind, path in written.items():
        print(f"{kind}: {path}")
    return written


def export_trainer(args: argparse.Namespace) -> dict:
    from dispatchrl.algorithms import ALGORITHMS
    from dispatchrl.export.trainer import trainer_source, write_trainer
    from dispatchrl.export.trainer_targets import build_trainer, elf_size, run_trainer

    algo = ALGORITHMS[args.algo]
    base = dataclasses.replace(algo.config_for(args.env), total_steps=args.steps)
    overrides = {k: v for k, v in dataclasses.asdict(_parse_overrides(base, args.set or [])).items()
                 if k != "total_steps" and v != getattr(base, k)}
    trainer = trainer_source(args.algo, args.env, args.steps, args.seed, overrides)
    written = {k: str(v) for k, v in write_trainer(args.out, trainer).items()}
    summary: dict = {"algo": args.algo, "env": args.env, "out": args.out, "state_bytes": trainer.state_bytes,
                     "files": written}
    if args.target:
        path = build_trainer(args.out, args.target, steps=args.steps, seed=args.seed)
        summary["build"] = str(path)
        if args.target == "cortex-m7":
            summary["size"] = elf_size(path)
        if args.run_built:
            summary["run"] = run_trainer(path, args.target, steps=args.steps, seed=args.seed)
    print(json.dumps(summary))
    return summary


def main(argv: list[str] | None = None) -> int:
    from dispatchrl import DispatchRLError
    from dispatchrl.algorithms import ALGORITHMS

    parser = argparse.ArgumentParser(prog="dispatchrl", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    p = commands.add_parser("train", help="train an agent, evaluate it, optionally save a checkpoint")
    p.add_argument("algo", choices=sorted(ALGORITHMS))
    p.add_argument("--env", default="pendulum", help="pendulum, acrobot, ant, or any gymnasium id")
    p.add_argument("--steps", type=int, default=None, help="total environment steps (default: the config's; PPO: the env's own config)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", help="cpu, generic, cuda or c")
    p.add_argument("--num-envs", type=int, default=None)
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config field (JSON value)")
    p.add_argument("--save", metavar="PATH", help="write the full training state (PATH.npz + PATH.json)")
    p.add_argument("--resume", metavar="PATH", help="continue from a checkpoint written by --save")
    p.add_argument("--no-eval", action="store_true", help="skip the 10 evaluation episodes")
    p.add_argument("--json", action="store_true", help="end with one JSON line (and no progress bar)")
    p.set_defaults(run=train)

    p = commands.add_parser("eval", help="evaluate a checkpoint's deterministic policy")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--seed", type=int, default=None, help="first reset seed (default: the fixed evaluation seeds)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=evaluate)

    p = commands.add_parser("export", help="write a checkpoint's policy as dependency-free C (policy.h, policy.c)")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--target", default=None,
                   help="also build for host, aarch64-linux, armhf-linux, riscv64-linux or cortex-m4")
    p.add_argument("--name", default="policy")
    p.set_defaults(run=export)

    p = commands.add_parser("export-trainer",
                            help="write a whole training run as dependency-free C99 (trainer.h, trainer.c, main.c)")
    p.add_argument("algo", choices=sorted(ALGORITHMS))
    p.add_argument("--env", default="pendulum", help="pendulum, acrobot (a native env)")
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=10_000, help="total_steps of the config (replay capacity by default)")
    p.add_argument("--seed", type=int, default=0, help="main's default seed")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config field (JSON value)")
    p.add_argument("--target", default=None,
                   help="also build for host, aarch64-linux, armhf-linux, riscv64-linux, cortex-m7 or wasm32-wasi")
    p.add_argument("--run", dest="run_built", action="store_true", help="run the build (under qemu or node for other targets)")
    p.set_defaults(run=export_trainer)

    p = commands.add_parser("demo", help="train one small MLP, written once, fused on every available device")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=demo)

    args = parser.parse_args(argv)
    try:
        args.run(args)
    except DispatchRLError as error:
        print(f"dispatchrl: error: {type(error).__name__}: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
