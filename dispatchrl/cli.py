"""The ``dispatchrl`` command line: train, eval, plot, export, export-trainer, sweep, web, demo."""

import argparse
import dataclasses
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

__all__ = ["build_parser", "console", "main", "resume_command", "strict_json"]

if TYPE_CHECKING:
    from dispatchrl.devices import Device


def available_devices() -> list["Device"]:
    """Generic and CPU always; C when a C compiler is installed; CUDA when a GPU (or the
    simulator) is usable."""
    import dispatchrl as drl
    from dispatchrl.backends.c.compiler import host_compiler

    devices: list[drl.Device] = [drl.Generic(), drl.CPU()]
    try:
        host_compiler()
        devices.append(drl.C())
    except drl.DeviceError:
        pass
    try:
        devices.append(drl.CUDA())
    except drl.DeviceError:
        pass
    return devices


def demo(args: argparse.Namespace) -> None:
    """Train one small MLP regression, written once, fused on every available device."""
    import dispatchrl as drl
    from dispatchrl import nn

    for device in available_devices():
        start = time.perf_counter()
        step, _, loss, _ = nn.regression_demo(device, args.batch)
        step(1)
        first = float(drl.to_numpy(loss)[0])
        build = time.perf_counter() - start
        start = time.perf_counter()
        step(args.steps - 1)
        final = float(drl.to_numpy(loss)[0])  # a CUDA launch returns at once: the read-back waits for it
        seconds = time.perf_counter() - start
        record = {
            "device": repr(device),
            "steps": args.steps,
            "first_loss": round(first, 4),
            "final_loss": round(final, 5),
            "build_seconds": round(build, 3),
            "microseconds_per_step": round(seconds / max(args.steps - 1, 1) * 1e6, 2),
        }
        print(
            json.dumps(record)
            if args.json
            else f"{record['device']:>10}: loss {first:.4f} -> {record['final_loss']:.5f} in {args.steps} fused "
            f"steps, {record['microseconds_per_step']:.1f} µs/step (built in {build:.2f} s)",
            flush=True,
        )


def _parse_overrides(config: Any, pairs: list[str]) -> Any:
    """``--set key=value`` (JSON values; lists become tuples) onto a config dataclass."""
    from dispatchrl import ConfigError
    from dispatchrl.cli_config import parse_value

    types = {f.name: f.type for f in dataclasses.fields(config)}
    changes = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or key not in types:
            raise ConfigError(f"--set {pair!r}: expected key=value with key one of {sorted(types)}")
        changes[key] = parse_value(raw, types[key], f"--set {key}")
    return dataclasses.replace(config, **changes)


def strict_json(value: Any) -> str:
    """One line of strict JSON (RFC 8259: no NaN or Infinity): non-finite numbers become null."""

    def clean(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        if isinstance(v, (float, np.floating)):
            return float(v) if np.isfinite(v) else None
        if isinstance(v, np.integer):
            return int(v)
        return v

    return json.dumps(clean(value), allow_nan=False)


def _run_config(args: argparse.Namespace) -> tuple[Any, str, Any, int]:
    """(algorithm, env, config, seed) of ``train``: from the flags, or with ``--resume`` from the
    checkpoint, where the flags may only raise the step budget unless ``--override`` is given."""
    from dispatchrl import ConfigError, checkpoint
    from dispatchrl.algorithms import ALGORITHMS
    from dispatchrl.cli_config import load_config_file
    from dispatchrl.training.runs import config_from_metadata
    from dispatchrl.training.trust import check_checkpoint_code, check_memmap_named, check_run_metadata

    algo = ALGORITHMS[args.algo]
    if args.resume is None:
        env = args.env or "pendulum"
        config = algo.config_for(env)  # PPO's budget and hyperparameters depend on the env
        if args.config is not None:
            config = load_config_file(config, args.config)
        if args.steps is not None:
            config = dataclasses.replace(config, total_steps=args.steps)
        if args.num_envs is not None:
            config = dataclasses.replace(config, num_envs=args.num_envs)
        config = _parse_overrides(config, args.set or [])
        config.validate()
        return algo, env, config, 0 if args.seed is None else args.seed
    meta = checkpoint.load_metadata(args.resume)
    check_run_metadata(meta, args.resume)
    for what, given, saved in (
        ("algorithm", args.algo, meta.get("algo")),
        ("--env", args.env, meta.get("env")),
        ("--seed", args.seed, meta.get("seed")),
    ):
        if given is not None and given != saved:  # these name the run: --override cannot change them
            raise ConfigError(
                f"--resume {args.resume}: {what} is {given!r} but the checkpoint's run has {saved!r}; "
                f"leave it out to continue that run"
            )
    saved_config = config_from_metadata(algo, meta, args.resume)
    wanted = saved_config if args.config is None else load_config_file(saved_config, args.config)
    wanted = _parse_overrides(wanted, args.set or [])
    if args.num_envs is not None:
        wanted = dataclasses.replace(wanted, num_envs=args.num_envs)
    if args.steps is not None:
        if args.steps < saved_config.total_steps:
            raise ConfigError(
                f"--resume {args.resume}: --steps {args.steps} is below the checkpoint's budget "
                f"total_steps={saved_config.total_steps}; the step budget may only be raised"
            )
        wanted = dataclasses.replace(wanted, total_steps=args.steps)
    for field in dataclasses.fields(saved_config):
        before, after = getattr(saved_config, field.name), getattr(wanted, field.name)
        if field.name == "total_steps" or before == after:
            continue
        if not args.override:
            raise ConfigError(
                f"--resume {args.resume}: {field.name}={after!r} contradicts the checkpoint's "
                f"{field.name}={before!r}; leave it out to continue the run as it was, or pass "
                f"--override to change it on purpose"
            )
        print(
            f"dispatchrl: warning: --override: {field.name} changed from {before!r} (checkpoint) to {after!r}; "
            f"the resumed run no longer continues the original bit for bit",
            file=sys.stderr,
        )
    wanted.validate()
    named = _named_fields(saved_config, args)
    check_checkpoint_code(meta, wanted, args.resume, args.trust_code, named={args.env, *vars(named).values()})
    check_memmap_named(wanted, getattr(named, "memmap_path", None), args.resume)
    return algo, meta["env"], wanted, int(meta["seed"])


def _named_fields(saved_config: Any, args: argparse.Namespace) -> Any:
    """``saved_config`` holding only what this command line names (--set, its --FIELD aliases,
    --config) in the fields naming code or files (the others: None), to tell a checkpoint's own
    values from those the user gave again."""
    from dispatchrl.cli_config import load_config_file
    from dispatchrl.training.trust import NETWORK_FIELDS

    fields = [f for f in (*NETWORK_FIELDS, "memmap_path") if hasattr(saved_config, f)]
    named = dataclasses.replace(saved_config, **dict.fromkeys(fields))
    named = named if args.config is None else load_config_file(named, args.config)
    named = _parse_overrides(named, args.set or [])
    return argparse.Namespace(**{f: getattr(named, f) for f in fields})


def _check_writable(path: str, directory: bool, flag: str = "--save") -> None:
    """Refuse an output path that cannot be written, before any training: create its folder
    (``path`` itself when ``directory``) and write and remove a probe file there."""
    import os
    import tempfile
    from pathlib import Path

    from dispatchrl import ConfigError

    folder = Path(path) if directory else Path(path).parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".dispatchrl-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise ConfigError(f"{flag} {path}: cannot write there ({e.strerror or e}); choose a writable path") from None
    if not directory and Path(path).with_suffix(".npz").is_dir():
        raise ConfigError(f"--save {path}: is a directory of checkpoints; pass --save-every to add to it")


def train(args: argparse.Namespace) -> dict:
    from dispatchrl.checkpoint import SaveLock

    for flag in ("save_every", "keep"):
        value = getattr(args, flag)
        if value is not None and (value < 1 or not args.save):
            raise _config_error(f"--{flag.replace('_', '-')} needs --save and a positive int, got {value}")
    for flag in ("eval_every", "eval_episodes"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise _config_error(f"--{flag.replace('_', '-')} must be a positive int, got {value}")
    if args.keep_best is not None and args.keep_best < 0:
        raise _config_error(f"--keep-best must be an int >= 0 (0: deploy the final policy), got {args.keep_best}")
    if args.logger is not None and args.log_dir is None:
        raise _config_error(f"--logger {args.logger} needs --log-dir DIR (where the logs go)")
    algo, env, config, seed = _run_config(args)
    _warn_all_warmup(config)
    if args.resume is not None and not args.save:  # the hint of older versions lost the protection
        every = " --save-every N" if os.path.isdir(args.resume) else ""
        print(
            f"dispatchrl: warning: --resume without --save: the resumed run is not checkpointed; add "
            f"--save {args.resume}{every} to keep saving where it resumed from",
            file=sys.stderr,
        )
    if args.save:
        _check_save_target(args.save, directory=args.save_every is not None)
        _check_writable(args.save, directory=args.save_every is not None)
        # one run at a time writes a --save path: a second one is refused, naming the first
        with SaveLock(args.save, directory=args.save_every is not None):
            return _train(args, algo, env, config, seed)
    return _train(args, algo, env, config, seed)


def _train(args: argparse.Namespace, algo: Any, env: str, config: Any, seed: int) -> dict:
    import signal

    from dispatchrl.devices import device_from_name
    from dispatchrl.errors import CheckpointWriteError
    from dispatchrl.training import evaluate
    from dispatchrl.training.callbacks import EvalCallback
    from dispatchrl.training.driver import DiskSpaceCheck, PeriodicCheckpoint, Progress, StopOnRequest, train
    from dispatchrl.training.envspec import resolve_env
    from dispatchrl.training.runs import check_finite_state

    logger = None
    if args.log_dir is not None:
        from dispatchrl.loggers import make_logger

        _check_writable(args.log_dir, directory=True, flag="--log-dir")
        logger = make_logger(args.logger or "csv", args.log_dir, append=args.resume is not None)
    device = device_from_name(args.device)
    periodic = (
        PeriodicCheckpoint(args.save, args.save_every, args.keep or 3, stop_on_error=True)
        if args.save_every is not None
        else None
    )
    space = DiskSpaceCheck(args.save) if args.save and not periodic else None
    stop = StopOnRequest(periodic, save=(lambda run: run.save(args.save)[0]) if args.save and not periodic else None)
    evaluation = EvalCallback(args.eval_every, args.eval_episodes) if args.eval_every is not None else None
    spec = resolve_env(env, config.num_envs)
    keep_best = None
    every = keep_best_every(spec, config.total_steps) if args.keep_best is None else args.keep_best
    if 0 < every < config.total_steps and not args.no_eval and spec.eval_id is not None:
        # with --save, the best policy's run is saved beside the final one (SB3's best_model)
        best_path = f"{Path(args.save).with_suffix('')}-best" if args.save else None
        keep_best = EvalCallback(every, KEEP_BEST_EPISODES, best_path, deploy_best=True)
    previous = signal.signal(signal.SIGINT, _second_interrupt_raises(stop))
    try:
        result = train(
            algo,
            device,
            spec,
            config,
            seed=seed,
            progress=Progress(interval=args.progress_interval) if not args.json else False,
            resume=args.resume,
            hooks=tuple(h for h in (space, evaluation, keep_best, periodic, stop) if h is not None),
            logger=logger,
        )
    finally:
        signal.signal(signal.SIGINT, previous)
        if logger is not None:
            logger.close()
    # with the in-step check off (check_every=0) a diverged run ends here: say so, save nothing
    check_finite_state(result.state, result.steps)
    # a checkpoint that cannot be written (a full disk) loses nothing silently: the run's result
    # is still evaluated and reported, with the error and the newest complete checkpoint
    save_error = periodic.error if periodic is not None else None
    if args.save and periodic is None:
        try:
            result.save(args.save)
        except CheckpointWriteError as error:
            save_error = error
    saved = None if save_error is not None else str(periodic.path) if periodic is not None else args.save
    evaluator = result.spec.eval_id if result.spec.eval_id is not None else result.spec.make_eval_env
    skip_eval = args.no_eval or evaluator is None
    eval_return, eval_returns = (None, []) if skip_eval else evaluate(result.policy, evaluator)
    task = {} if skip_eval or result.spec.native is None else _task_metrics(result.spec.native, result.policy)
    summary = {
        "status": "ok",
        **result.summary(),
        "eval_return": None if eval_return is None else round(eval_return, 3),
        "eval_returns": [round(r, 3) for r in eval_returns],
        **task,
        "saved": saved,
        "saved_best": None if keep_best is None or keep_best.best_path is None else f"{keep_best.best_path}.npz",
    }
    if save_error is not None:
        summary.update(
            status="save_failed",
            error=f"{type(save_error).__name__}: {save_error}",
            last_good_checkpoint=save_error.last_good,
        )
        print(f"dispatchrl: error: {summary['error']}", file=sys.stderr)
    if args.json:
        print(strict_json(summary))
    else:
        print(
            f"{summary['algo']} on {summary['env']} ({summary['device']}): {summary['steps']} steps in "
            f"{summary['train_seconds']:.2f} s (+{summary['compile_seconds']:.2f} s compile)"
            + (
                ""
                if eval_return is None
                else f", evaluation return {eval_return:.1f} over {len(eval_returns)} episodes"
                + (
                    ""
                    if summary["policy_steps"] == summary["steps"]
                    else f" of the policy at step {summary['policy_steps']} (--keep-best)"
                )
            )
            + "".join(f", {name} {value}" for name, value in task.items())
            + (f"; saved {saved}" if saved else "")
            + (f" (best policy's run: {summary['saved_best']})" if saved and summary["saved_best"] else "")
        )
    return summary


def _warn_all_warmup(config: Any) -> None:
    """Say so when the warm-up (uniform random actions, no updates) covers the whole run."""
    warmup = getattr(config, "warmup_steps", None)
    if warmup is not None and warmup * config.num_envs >= config.total_steps:
        print(
            f"dispatchrl: warning: warmup_steps={warmup}{' per env' if config.num_envs > 1 else ''} covers the "
            f"whole run of {config.total_steps} steps: every action is random and nothing is trained; lower "
            "--warmup-steps or raise --steps",
            file=sys.stderr,
        )


def _check_save_target(path: str, directory: bool) -> None:
    """Refuse a --save that names a special file (``/dev/null``: the checkpoint would go to
    ``/dev/null.npz``), or, with --save-every, a folder holding anything but checkpoints."""
    from pathlib import Path

    from dispatchrl import ConfigError

    for candidate in (Path(path), Path(path).with_suffix(".npz")):
        if candidate.exists() and not (candidate.is_file() or candidate.is_dir()):
            raise ConfigError(
                f"--save {path}: {candidate} is a special file, not a checkpoint; give a file path "
                "(PATH.npz and PATH.json are written) or a folder with --save-every"
            )
    folder = Path(path)
    if directory and folder.is_dir():
        others = sorted(p.name for p in folder.iterdir() if not p.name.startswith(("step-", ".")))
        if others:
            raise ConfigError(
                f"--save {path} --save-every: the folder holds files that are not checkpoints "
                f"({', '.join(others[:5])}); give a new folder or one of step-*.npz checkpoints"
            )


def _config_error(message: str) -> Exception:
    from dispatchrl import ConfigError

    return ConfigError(message)


def _second_interrupt_raises(stop: Any) -> Any:
    """SIGINT handler: the first asks the run to stop (and save) at the next chunk boundary,
    a second one interrupts at once."""

    def handler(signum: int, frame: Any) -> None:
        if stop.requested:
            raise KeyboardInterrupt
        stop.request()
        print(
            "\ndispatchrl: interrupted: stopping at the next step boundary (Ctrl-C again to abort without saving)",
            file=sys.stderr,
            flush=True,
        )

    return handler


def _task_metrics(native: Any, policy: Any) -> dict[str, float]:
    """The native env's task measures of ``policy`` (NativeEnv.task_metrics), rounded for the JSON."""
    return {name: round(float(value), 4) for name, value in native.task_metrics(policy).items()}


def evaluate(args: argparse.Namespace) -> dict:
    from dispatchrl import CheckpointError
    from dispatchrl.algorithms import ALGORITHMS
    from dispatchrl.training import EVAL_SEEDS, load_run
    from dispatchrl.training import evaluate as evaluate_policy

    limit = len(EVAL_SEEDS) if args.seed is None else 10_000
    if not 1 <= args.episodes <= limit:
        what = f"{len(EVAL_SEEDS)} fixed evaluation seeds; pass --seed for more" if args.seed is None else "at most"
        raise _config_error(f"--episodes must be an int in [1, {limit}] ({what}), got {args.episodes}")
    if args.seed is not None and not 0 <= args.seed < 2**31 - limit:
        raise _config_error(f"--seed must be an int in [0, 2**31 - {limit}), got {args.seed}")
    if args.video is not None and "MUJOCO_GL" not in os.environ and not os.environ.get("DISPLAY"):
        os.environ["MUJOCO_GL"] = "egl"  # headless: MuJoCo's offscreen renderer (Ant, ...) through EGL
    algo, name, spec, _, state = load_run(args.checkpoint, ALGORITHMS, trust_code=args.trust_code)
    deterministic = spec.deployed_policy(algo, state)

    def policy(obs: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):  # overflowing weights: refused below, not warned about
            action = deterministic(obs)
        if not np.all(np.isfinite(action)):
            raise CheckpointError(
                f"checkpoint {args.checkpoint}: its policy outputs NaN or inf actions (for "
                f"observation {np.asarray(obs).tolist()}): the weights diverged; evaluate an earlier "
                "checkpoint"
            )
        return action

    seeds = tuple(range(args.seed, args.seed + args.episodes)) if args.seed is not None else EVAL_SEEDS[: args.episodes]
    source: Any = spec.eval_id if spec.eval_id is not None else spec.make_eval_env
    if args.video is not None:
        from dispatchrl.video import record_episodes

        if spec.eval_id is None:
            raise _config_error(f"--video: the env {spec.name!r} has no gymnasium id to render")
        source = record_episodes(spec.eval_id, args.video)
    try:
        mean, returns = evaluate_policy(policy, source, seeds)
    finally:
        if args.video is not None:
            source.close()
    summary: dict[str, Any] = {
        "status": "ok",
        "algo": name,
        "env": spec.name,
        "checkpoint": str(args.checkpoint),
        "episodes": len(returns),
        "eval_return": round(mean, 3),
        "eval_returns": [round(r, 3) for r in returns],
        **({} if spec.native is None else _task_metrics(spec.native, policy)),
    }
    if args.video is not None:
        summary["videos"] = [str(path) for path in source.paths]
    print(
        strict_json(summary)
        if args.json
        else f"{name} on {spec.name}: mean return {mean:.1f} over {len(returns)} episodes"
    )
    return summary


def plot(args: argparse.Namespace) -> str:
    from dispatchrl.plot import plot_runs

    out = plot_runs(args.dirs, args.out, args.metric, args.smooth, args.title)
    print(out)
    return str(out)


def export(args: argparse.Namespace) -> dict:
    from dispatchrl import export as c_export
    from dispatchrl.algorithms import ALGORITHMS
    from dispatchrl.export.folder import claim_folder, record_folder
    from dispatchrl.training import load_run

    algo, _, spec, _, state = load_run(args.checkpoint, ALGORITHMS, trust_code=args.trust_code)
    policy = spec.deployed_policy(algo, state)
    kept = claim_folder(args.out)
    try:
        written = c_export.write_policy(policy, args.out, target=args.target, name=args.name, env=spec.native)
    finally:
        record_folder(args.out, kept)
    for kind, path in written.items():
        print(f"{kind}: {path}")
    return written


def export_trainer(args: argparse.Namespace) -> dict:
    from dispatchrl.algorithms import ALGORITHMS
    from dispatchrl.export.folder import claim_folder, record_folder
    from dispatchrl.export.trainer import trainer_source, write_trainer
    from dispatchrl.export.trainer_targets import build_trainer, elf_size, run_plan, run_trainer

    algo = ALGORITHMS[args.algo]
    steps_given, args.steps = args.steps is not None, 10_000 if args.steps is None else args.steps
    base = dataclasses.replace(algo.config_for(args.env), total_steps=args.steps)
    overrides = {
        k: v
        for k, v in dataclasses.asdict(_parse_overrides(base, args.set or [])).items()
        if k != "total_steps" and v != getattr(base, k)
    }
    if args.target == "web":  # a static page around the trainer compiled to wasm
        from dispatchrl.export.web import build_web

        kept = claim_folder(args.out)
        try:
            web_summary = build_web(args.out, args.algo, args.env, args.steps, args.seed, overrides)
        finally:
            record_folder(args.out, kept)
        print(json.dumps(web_summary))
        return web_summary
    trainer = trainer_source(args.algo, args.env, args.steps, args.seed, overrides)
    plan = run_plan(args.target, args.steps, steps_given) if args.target and args.run_built else None
    if plan is not None and plan.note:
        print(f"dispatchrl: {plan.note}", file=sys.stderr, flush=True)
    kept = claim_folder(args.out)
    try:
        written = {k: str(v) for k, v in write_trainer(args.out, trainer).items()}
        summary: dict = {
            "algo": args.algo,
            "env": args.env,
            "out": args.out,
            "state_bytes": trainer.state_bytes,
            "files": written,
        }
        if args.target:
            steps = args.steps if plan is None else plan.steps  # cortex-m7: built into its main
            path = build_trainer(args.out, args.target, steps=steps, seed=args.seed)
            summary["build"] = str(path)
            if args.target == "cortex-m7":
                summary["size"] = elf_size(path)
            if plan is not None:
                summary["run"] = run_trainer(path, args.target, steps=plan.steps, seed=args.seed, timeout=plan.timeout)
    finally:
        record_folder(args.out, kept, later=("trainer",))  # what `make` builds
    print(json.dumps(summary))
    return summary


def web(args: argparse.Namespace) -> None:
    """Build the training page into the cache and serve it on localhost until interrupted."""
    import threading

    from dispatchrl import ConfigError, DeviceError
    from dispatchrl.algorithms import ALGORITHMS
    from dispatchrl.export.web import page_steps, serve, web_folder
    from dispatchrl.training.driver import check_seed

    if args.steps is None:
        args.steps = page_steps(args.algo, args.env)
    config = dataclasses.replace(ALGORITHMS[args.algo].config_for(args.env), total_steps=args.steps)
    config.validate()  # the same ConfigError as train for --steps
    check_seed(args.seed)
    if not 0 <= args.port < 65536:
        raise ConfigError(f"--port must be in [0, 65536), got {args.port}")
    folder = web_folder(args.algo, args.env, args.steps, args.seed)
    try:
        server = serve(folder, args.port)
    except OSError as error:
        raise DeviceError(f"--port {args.port}: cannot serve on localhost: {error}") from None
    print(f"dispatchrl: serving {folder} at http://127.0.0.1:{server.server_address[1]}/ (Ctrl-C stops)", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()


def sweep(args: argparse.Namespace) -> dict:
    """``dispatchrl sweep SPEC``: run, continue or report a hyperparameter study (dispatchrl.sweep)."""
    from dispatchrl import sweep as sweeps

    if args.report:
        return sweeps.report(args.out)
    if args.spec is None:
        raise _config_error("sweep needs a SPEC file (or --report with --out)")
    spec = sweeps.load_spec(args.spec)
    summary = sweeps.sweep(spec, args.out, args.engine, args.resume, args.workers, args.address, args.verbose)
    print(strict_json(summary))
    sweeps.check_summary(summary, args.out)  # every trial failed: exit non-zero
    return summary


def _add_sweep_command(commands: Any) -> None:
    p = commands.add_parser("sweep", help="a hyperparameter study from a JSON/TOML SPEC (Optuna, or Ray Tune)")
    p.add_argument("spec", nargs="?", help="the SPEC file (not needed with --report)")
    p.add_argument("--out", default="sweep", help="study folder: study.db, trials.csv, best_config.json")
    p.add_argument("--engine", choices=("optuna", "ray"), default="optuna")
    p.add_argument("--address", default=None, help="with --engine ray: the cluster (ray://host:port)")
    p.add_argument("--workers", type=int, default=None, help="parallel trials (default: the SPEC's, else the cores)")
    p.add_argument("--resume", action="store_true", help="continue the study in --out")
    p.add_argument("--report", action="store_true", help="print and plot the best trials and each field's effect")
    p.add_argument(
        "--verbose", action="store_true", help="with --engine ray: show Ray's own log (default: errors only)"
    )
    p.set_defaults(run=sweep)


def add_web_command(commands: Any) -> None:
    from dispatchrl.algorithms import ALGORITHMS

    p = commands.add_parser("web", help="serve a page that trains in the browser (the trainer compiled to wasm)")
    p.add_argument("--algo", default="td3", choices=sorted(ALGORITHMS))
    p.add_argument("--env", default="pendulum", help="pendulum, acrobot, cartpole or multirotor (a native env)")
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        help="the page's default steps (and the replay capacity); default 10k, or the env's recipe where its "
        "warm-up is as long (multirotor: 300k)",
    )
    p.add_argument("--seed", type=int, default=0, help="the page's default seed")
    p.add_argument("--port", type=int, default=8000, help="0: any free port")
    p.set_defaults(run=web)


#: episodes of each --keep-best evaluation (SB3's EvalCallback default)
KEEP_BEST_EPISODES = 5
#: the default --keep-best period's floor: a run of at most this many steps deploys its final policy
KEEP_BEST_MIN_STEPS = 1000
#: --keep-best evaluations over a run by default (a native env may ask for more: selection_evaluations)
KEEP_BEST_EVALUATIONS = 10


def keep_best_every(spec: Any, total_steps: int) -> int:
    """The default --keep-best period of a ``total_steps`` run on ``spec``'s env: its
    ``selection_evaluations`` evaluations over the run (10 for any other env), at least
    :data:`KEEP_BEST_MIN_STEPS` apart."""
    evaluations = spec.native.selection_evaluations if spec.native is not None else KEEP_BEST_EVALUATIONS
    return max(total_steps // evaluations, KEEP_BEST_MIN_STEPS)


#: the help of --trust-code (train --resume, eval, export)
TRUST_CODE_HELP = (
    "import the user network/env modules ('module:function') the checkpoint names: it runs their code, "
    "so only for checkpoints you trust (without it they are refused unless named again)"
)


def _train_flags(p: argparse.ArgumentParser) -> None:
    """The flags of ``train ALGO`` besides the config fields."""
    p.add_argument(
        "--env",
        default=None,
        help="pendulum (default), acrobot, cartpole, mountaincar, multirotor, ant, halfcheetah, hopper, walker2d, humanoid, any gymnasium id, or module:NativeEnvClass",
    )
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        help="total environment steps (default: the config's; PPO: the env's own config); "
        "--total-steps is the same flag",
    )
    p.add_argument("--seed", type=int, default=None, help="default 0 (with --resume: the checkpoint's)")
    p.add_argument("--device", default="cpu", help="cpu (default), generic, cuda or c")
    p.add_argument(
        "--num-envs", type=int, default=None, metavar="INT", help="parallel environments [int, default: the config's]"
    )
    p.add_argument(
        "--set", action="append", metavar="KEY=VALUE", help="override a config field (JSON value); as --FIELD VALUE"
    )
    p.add_argument("--save", metavar="PATH", help="write the full training state (PATH.npz + PATH.json)")
    p.add_argument(
        "--save-every",
        type=int,
        default=None,
        metavar="N",
        help="also checkpoint every N steps: PATH becomes a directory of step-*.npz",
    )
    p.add_argument(
        "--keep", type=int, default=None, metavar="K", help="with --save-every: keep the newest K (default 3)"
    )
    p.add_argument(
        "--resume",
        metavar="PATH",
        help="continue the run of a checkpoint (file or --save-every directory: its newest complete one) "
        "with its algorithm, env and config; only --steps may raise the budget",
    )
    p.add_argument(
        "--override", action="store_true", help="with --resume: let --set/--num-envs change the checkpoint's config"
    )
    p.add_argument("--trust-code", action="store_true", help=TRUST_CODE_HELP)
    p.add_argument("--no-eval", action="store_true", help="skip the 10 evaluation episodes")
    p.add_argument(
        "--eval-every",
        type=int,
        default=None,
        metavar="N",
        help="also evaluate the deterministic policy every N steps during training (EvalCallback); "
        "with --log-dir its eval_return rows go into the logs",
    )
    p.add_argument(
        "--eval-episodes", type=int, default=5, metavar="K", help="with --eval-every: episodes each (default 5)"
    )
    p.add_argument(
        "--keep-best",
        type=int,
        default=None,
        metavar="N",
        help=f"every N steps and at the end, evaluate the deterministic policy on {KEEP_BEST_EPISODES} episodes "
        "held out from the final evaluation's and deploy the best one (what is evaluated and printed; "
        "with --save, PATH-best holds the run at that step, PATH the final state); default: a tenth of the "
        f"run (the multirotor: a thirtieth), at least {KEEP_BEST_MIN_STEPS}; 0 (or N >= the run): deploy the "
        "final policy",
    )
    p.add_argument("--json", action="store_true", help="end with one JSON line (and no progress bar)")
    p.add_argument(
        "--progress-interval",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="when stderr is not a terminal: a progress line every SECONDS (default 10)",
    )
    p.add_argument(
        "--config", metavar="FILE.json", help="load the config from a JSON object of its fields (as --log-dir writes)"
    )
    p.add_argument("--log-dir", metavar="DIR", help="write metrics (progress.csv), config.json and run.json there")
    p.add_argument(
        "--logger",
        default=None,
        metavar="NAMES",
        help="with --log-dir: comma-separated backends among csv, tensorboard, wandb (default: csv)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``dispatchrl`` argument parser (``train ALGO`` has a flag per Config field)."""
    from dispatchrl import __version__
    from dispatchrl.algorithms import ALGORITHMS
    from dispatchrl.cli_config import add_config_flags

    parser = _Parser(prog="dispatchrl", description=(__doc__ or "").replace("``", ""))
    parser.add_argument("--version", action="version", version=f"dispatchrl {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    train_parser = commands.add_parser(
        "train",
        help="train an agent, evaluate it, optionally save a checkpoint",
        description="train an agent; `dispatchrl train ALGO --help` lists ALGO's config fields",
    )
    algorithms = train_parser.add_subparsers(dest="algo", required=True, metavar="ALGO")
    for name, module in sorted(ALGORITHMS.items()):
        p = algorithms.add_parser(
            name,
            help=f"train {name.upper()}",
            description=f"Train {name.upper()}, evaluate it, optionally save a checkpoint. Config defaults "
            "shown are Pendulum's (PPO's depend on --env).",
        )
        _train_flags(p)
        add_config_flags(p, module.config_for("pendulum"), skip=("num_envs",))
        for action in p._actions:
            if "--total-steps" in action.option_strings:
                action.help = f"the same as --steps: {action.help}"
        p.set_defaults(run=train)

    p = commands.add_parser("eval", help="evaluate a checkpoint's deterministic policy")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--trust-code", action="store_true", help=TRUST_CODE_HELP)
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--seed", type=int, default=None, help="first reset seed (default: the fixed evaluation seeds)")
    p.add_argument("--video", metavar="DIR", default=None, help="write each episode as DIR/rl-video-episode-<i>.mp4")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=evaluate)

    p = commands.add_parser(
        "plot", help="draw learning curves of --log-dir runs (mean over seeds, min-max band) with matplotlib"
    )
    p.add_argument("dirs", nargs="+", metavar="DIR", help="a run's --log-dir, or a folder of them")
    p.add_argument("--metric", default="episode_return", help="a progress.csv column: episode_return, eval_return...")
    p.add_argument("--out", default="curve.png", help="the image (.png, .svg, .pdf)")
    p.add_argument("--smooth", type=int, default=1, metavar="N", help="running mean over N values of each run first")
    p.add_argument("--title", default=None)
    p.set_defaults(run=plot)

    p = commands.add_parser("export", help="write a checkpoint's policy as dependency-free C (policy.h, policy.c)")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--trust-code", action="store_true", help=TRUST_CODE_HELP)
    p.add_argument("--out", required=True)
    p.add_argument(
        "--target", default=None, help="also build for host, aarch64-linux, armhf-linux, riscv64-linux or cortex-m4"
    )
    p.add_argument("--name", default="policy")
    p.set_defaults(run=export)

    p = commands.add_parser(
        "export-trainer", help="write a whole training run as dependency-free C99 (trainer.h, trainer.c, main.c)"
    )
    p.add_argument("algo", choices=sorted(ALGORITHMS))
    p.add_argument(
        "--env", default="pendulum", help="pendulum, acrobot, cartpole, mountaincar, multirotor (a native env)"
    )
    p.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="the folder to write (new, empty, or an earlier export's, which is cleaned first)",
    )
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        help="total_steps of the config (replay capacity by default) and of --run (default 10000; "
        "under emulation --run trains 300 steps unless given)",
    )
    p.add_argument("--seed", type=int, default=0, help="main's default seed")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config field (JSON value)")
    p.add_argument(
        "--target",
        default=None,
        help="also build for host, aarch64-linux, armhf-linux, riscv64-linux, cortex-m7 or wasm32-wasi; "
        "web: a static page training in the browser (index.html, trainer.wasm)",
    )
    p.add_argument(
        "--run", dest="run_built", action="store_true", help="run the build (under qemu or node for other targets)"
    )
    p.set_defaults(run=export_trainer)

    _add_sweep_command(commands)

    p = commands.add_parser(
        "demo",
        help="train one small MLP, written once, fused on every available device "
        "(generic, cpu; c with a C compiler; cuda with a GPU)",
    )
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=demo)

    add_web_command(commands)
    return parser


def _parse_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``parser.parse_args``, except that an unknown flag is refused by the subcommand's parser
    (its usage, not the top level's) with the closest flag it has."""
    import difflib

    args, unknown = parser.parse_known_args(argv)
    if not unknown:
        return args
    command = parser
    while True:  # down to the innermost subcommand the arguments chose (train -> td3)
        subcommands = [a for a in command._actions if isinstance(a, argparse._SubParsersAction)]
        name = getattr(args, subcommands[0].dest, None) if subcommands else None
        if name not in (subcommands[0].choices if subcommands else {}):
            break
        command = subcommands[0].choices[name]
    flags = [option for action in command._actions for option in action.option_strings if option.startswith("--")]
    message = f"unrecognized arguments: {' '.join(unknown)}"
    for word in unknown:
        close = difflib.get_close_matches(word.split("=", 1)[0], flags, n=1) if word.startswith("--") else []
        if close:
            message += f"; did you mean {close[0]}?"
            break
    command.error(message)


class _UsageError(Exception):
    """A command line argparse refused (its usage line is already on stderr)."""


class _Parser(argparse.ArgumentParser):
    """argparse's parser (its subcommands' too), raising :class:`_UsageError` where argparse
    would exit, so ``main`` can still end ``--json`` output with its one JSON line."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        raise _UsageError(f"{self.prog}: error: {message}")


def _check_output_paths(args: argparse.Namespace) -> None:
    """Refuse, before any work, an output folder that is an existing file (or lies under one)."""
    from dispatchrl import ConfigError

    folders = [("--out", args.out)] if getattr(args, "out", None) and args.command != "plot" else []
    if args.command == "plot":  # --out is the image: its folder must be one
        folders.append(("--out", str(Path(args.out).parent)))
    folders += [(flag, getattr(args, name, None)) for flag, name in (("--video", "video"), ("--log-dir", "log_dir"))]
    for flag, folder in folders:
        if not folder:
            continue
        path = Path(folder)
        while not path.exists() and path != path.parent:
            path = path.parent
        if path.exists() and not path.is_dir():
            what = "is" if path == Path(folder) else f"lies under {str(path)!r}, which is"
            raise ConfigError(f"{flag} {folder!r} {what} an existing file, not a folder; name a folder")
    if args.command == "plot" and Path(args.out).is_dir():
        raise ConfigError(f"--out {args.out!r} is a folder; name the image file (.png, .svg, .pdf)")


def _check_study(args: argparse.Namespace) -> None:
    """``sweep --report`` / ``--resume`` read ``--out``'s study.db: it must be there and SQLite."""
    from dispatchrl import ConfigError

    if args.command != "sweep" or not (args.report or args.resume):
        return
    db = Path(args.out) / "study.db"
    flag = "--report" if args.report else "--resume"
    try:
        with db.open("rb") as f:
            head = f.read(16)
    except OSError as e:
        raise ConfigError(f"sweep {flag}: no study in {args.out!r} (study.db: {e.strerror or e})") from None
    if head != b"SQLite format 3\x00":
        raise ConfigError(f"sweep {flag}: {str(db)!r} is not a study (not an SQLite database)")


def _failed(args: argparse.Namespace, record: dict[str, Any], message: str, code: int) -> int:
    """A failed command's report: ``record`` as the one strict JSON line of ``--json`` (failures
    too), ``message`` on stderr; returns the exit status ``code``."""
    if getattr(args, "json", False):
        print(strict_json(record))
    print(message, file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    from dispatchrl import DispatchRLError, TrainingDiverged
    from dispatchrl.errors import CheckpointWriteError
    from dispatchrl.training.driver import StopRequested

    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = _parse_args(build_parser(), argv)
    except _UsageError as error:
        print(error, file=sys.stderr)
        if "--json" in argv:
            print(strict_json({"status": "error", "error": f"usage: {error}"}))
        raise SystemExit(2) from None
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _own_warnings_shown_plainly(warnings.showwarning)
            _check_output_paths(args)
            _check_study(args)
            outcome = args.run(args)
    except CheckpointWriteError as error:  # e.g. the save of an interrupted run on a full disk
        record: dict[str, Any] = {
            "status": "save_failed",
            "error": f"{type(error).__name__}: {error}",
            "last_good_checkpoint": error.last_good,
        }
        return _failed(args, record, f"dispatchrl: error: {type(error).__name__}: {error}", 2)
    except TrainingDiverged as error:
        record = {
            "status": "diverged",
            "quantity": error.quantity,
            "first_step": error.first_step,
            "last_step": error.last_step,
            "error": str(error),
        }
        return _failed(args, record, f"dispatchrl: error: TrainingDiverged: {error}", 3)  # ends with the hint
    except StopRequested as stopped:
        resume = None if stopped.saved is None else resume_command(args)
        record = {
            "status": "interrupted",
            "steps": stopped.steps,
            "saved": None if stopped.saved is None else str(stopped.saved),
            "resume_command": resume,
        }
        hint = "" if resume is None else f"; continue with: {resume}"
        return _failed(args, record, f"dispatchrl: interrupted: {stopped}{hint}", 130)
    except DispatchRLError as error:
        record = {"status": "error", "error": f"{type(error).__name__}: {error}"}
        return _failed(args, record, f"dispatchrl: error: {type(error).__name__}: {error}", 2)
    if isinstance(outcome, dict) and outcome.get("status") == "save_failed":  # reported, not saved
        return 2
    return 0


def _own_warnings_shown_plainly(show: Any) -> Any:
    """``warnings.showwarning`` printing dispatchrl's own warnings as the command's other messages
    (no source line); any other warning goes to ``show``."""

    def show_warning(message, category, filename, lineno, file=None, line=None) -> None:
        if category.__module__.startswith("dispatchrl"):
            print(f"dispatchrl: warning: {message}", file=sys.stderr if file is None else file)
        else:
            show(message, category, filename, lineno, file, line)

    return show_warning


def resume_command(args: argparse.Namespace) -> str:
    """The command continuing an interrupted ``train`` run with the protection it had: the same
    ``--save`` (and ``--save-every``/``--keep``), device, logs and evaluation flags."""
    import shlex

    words = ["dispatchrl", "train", args.algo, "--resume", args.save, "--save", args.save]
    if args.save_every is not None:
        words += ["--save-every", str(args.save_every), "--keep", str(args.keep or 3)]
    if args.device != "cpu":
        words += ["--device", args.device]
    if args.log_dir is not None:
        words += ["--log-dir", args.log_dir, *(["--logger", args.logger] if args.logger else [])]
    if args.eval_every is not None:
        words += ["--eval-every", str(args.eval_every), "--eval-episodes", str(args.eval_episodes)]
    if args.no_eval:
        words.append("--no-eval")
    if args.json:
        words.append("--json")
    return shlex.join(words)


def console() -> NoReturn:
    """The ``dispatchrl`` command and ``python -m dispatchrl``: :func:`main`, then an exit that
    skips the interpreter's teardown. Freeing the compiled kernels' objects one by one took 0.47 s
    after every command had done its work (a cold ``train td3``: 9.24 s wall, 5 % of it). The exit
    handlers still run, non-daemon threads are joined and stdio is flushed first: every file the
    commands write is closed by them, so nothing written is lost. Errors other than the exit
    itself take Python's usual path (traceback, teardown)."""
    import atexit
    import threading

    status: int | str | None
    try:
        status = main()
    except SystemExit as exit_:
        status = exit_.code
    if status is None:
        code = 0
    elif isinstance(status, int):
        code = status
    else:  # sys.exit("message"), as the interpreter reports it
        print(status, file=sys.stderr)
        code = 1
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:  # e.g. a closed pipe: the interpreter's own status for a failed flush
        code = code or 120
    os._exit(code)


if __name__ == "__main__":
    console()
