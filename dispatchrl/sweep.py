"""Hyperparameter sweeps: ``dispatchrl sweep SPEC``, Optuna on this machine, Ray Tune on a cluster.

A SPEC (JSON or TOML) names the algorithm, env, budget, seeds per trial, the objective and a
search space over Config fields::

    {"algo": "td3", "env": "pendulum", "steps": 10000, "trials": 20, "seeds": [0, 1],
     "objective": "eval_return",
     "space": {"actor_lr": {"log_uniform": [1e-4, 3e-3]}, "gamma": {"uniform": [0.95, 0.995]},
               "batch_size": {"choice": [64, 100, 256]}, "hidden": {"choice": [[64, 64], [128, 128]]}}}

Optional keys: ``device`` ("cpu"), ``config`` (fixed Config fields), ``workers`` (processes;
default the cores), ``sampler_seed`` (0), ``prune`` (true: Optuna's median pruning on the
training curve). Trials share one compiled program per structure: on CPU, float hyperparameters
are run-time values of the fused step (see dispatchrl.backends.cpu.RUNTIME_SCALARS), and every
process loads the programs from the one disk cache the parent warms before the pool starts.

Outputs under ``--out``: ``study.db`` (the Optuna study, SQLite: resumable, and the record of
every trial, failed ones with their error), ``trials.csv``, ``best_config.json`` (flat Config
fields, what ``dispatchrl train --config`` reads) and ``summary.json``.
"""

import dataclasses
import json
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

from .checks import check_json_text
from .errors import ConfigError
from .files import atomic_write_text

__all__ = [
    "OBJECTIVES",
    "SPACE_KINDS",
    "Spec",
    "check_summary",
    "load_spec",
    "parse_spec",
    "report",
    "run_trial",
    "sweep",
    "trial_config",
]

OBJECTIVES = ("eval_return", "auc")  # final evaluation return; mean training episode return
SPACE_KINDS = ("uniform", "log_uniform", "int", "choice")
_SPEC_KEYS = {"algo", "env", "steps", "trials", "seeds", "objective", "space", "device", "config", "workers"}
_SPEC_KEYS |= {"sampler_seed", "prune"}
STUDY = "dispatchrl"
_RAY_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"


@dataclass
class Spec:
    """A validated sweep specification (see the module docstring)."""

    algo: str
    env: str
    steps: int
    trials: int
    space: dict[str, dict[str, list]]
    seeds: tuple[int, ...] = (0,)
    objective: str = "eval_return"
    device: str = "cpu"
    config: dict[str, Any] = field(default_factory=dict)
    workers: int | None = None
    sampler_seed: int = 0
    prune: bool = True

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "seeds": list(self.seeds)}


def load_spec(path: str | Path) -> Spec:
    """Read a JSON or TOML (by suffix ``.toml``) SPEC file and validate it."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"sweep SPEC {str(path)!r} cannot be read: {e.strerror or e}") from None
    text = check_json_text(raw, f"sweep SPEC {str(path)!r}")  # UTF-8, nesting bounded (TOML's arrays too)
    try:
        document = _toml(text) if path.suffix == ".toml" else json.loads(text)
    except ValueError as e:  # TOMLDecodeError is a ValueError
        raise ConfigError(f"sweep SPEC {str(path)!r} is not valid {path.suffix.lstrip('.') or 'JSON'}: {e}") from None
    return parse_spec(document)


def _toml(text: str) -> Any:
    try:
        import tomllib  # Python 3.11+
    except ImportError:
        raise ConfigError("a TOML sweep SPEC needs Python 3.11+ (tomllib); write it as JSON") from None
    return tomllib.loads(text)


def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def trial_config(spec: Spec, params: Mapping[str, Any]) -> Any:
    """The algorithm's Config of one trial: its env's defaults, the SPEC's fixed fields, the
    sampled ``params`` and ``total_steps`` = the SPEC's steps (validated)."""
    from .algorithms import ALGORITHMS

    algo = ALGORITHMS[spec.algo]
    changes = {k: _tuples(v) for k, v in {**spec.config, **params}.items()}
    config = dataclasses.replace(algo.config_for(spec.env), total_steps=spec.steps, **changes)
    config.validate()
    return config


def parse_spec(document: Mapping[str, Any]) -> Spec:
    """A :class:`Spec` from a decoded SPEC; ConfigError naming the first bad field: unknown keys,
    unknown Config fields, empty or malformed ranges, values outside the Config's rules."""
    from .algorithms import ALGORITHMS

    if not isinstance(document, Mapping):
        raise ConfigError(f"sweep SPEC must be an object, got {type(document).__name__}")
    unknown = sorted(set(document) - _SPEC_KEYS)
    if unknown:
        raise ConfigError(f"sweep SPEC: unknown key {unknown[0]!r}; expected some of {sorted(_SPEC_KEYS)}")
    for key in ("algo", "env", "steps", "trials", "space"):
        if key not in document:
            raise ConfigError(f"sweep SPEC: missing {key!r}")
    if document["algo"] not in ALGORITHMS:
        raise ConfigError(f"sweep SPEC algo must be one of {sorted(ALGORITHMS)}, got {document['algo']!r}")
    for key in ("steps", "trials"):
        value = document[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"sweep SPEC {key} must be a positive int, got {value!r}")
    seeds = document.get("seeds", [0])
    if (
        not isinstance(seeds, list)
        or not seeds
        or not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s < 2**31 for s in seeds)
    ):
        raise ConfigError(f"sweep SPEC seeds must be a non-empty list of ints in [0, 2**31), got {seeds!r}")
    objective = document.get("objective", "eval_return")
    if objective not in OBJECTIVES:
        raise ConfigError(f"sweep SPEC objective must be one of {list(OBJECTIVES)}, got {objective!r}")
    workers = document.get("workers")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ConfigError(f"sweep SPEC workers must be a positive int, got {workers!r}")
    fixed = document.get("config", {})
    if not isinstance(fixed, Mapping):
        raise ConfigError(f"sweep SPEC config must be an object of Config fields, got {fixed!r}")
    space = document["space"]
    if not isinstance(space, Mapping) or not space:
        raise ConfigError("sweep SPEC space is empty: give at least one Config field to search")
    spec = Spec(
        algo=document["algo"],
        env=str(document["env"]),
        steps=document["steps"],
        trials=document["trials"],
        space={},
        seeds=tuple(seeds),
        objective=objective,
        device=str(document.get("device", "cpu")),
        config=dict(fixed),
        workers=workers,
        sampler_seed=int(document.get("sampler_seed", 0)),
        prune=bool(document.get("prune", True)),
    )
    fields = {f.name for f in dataclasses.fields(ALGORITHMS[spec.algo].Config)} - {"total_steps"}
    for name in list(fixed) + list(space):
        if name not in fields:
            raise ConfigError(
                f"sweep SPEC: {name!r} is not a field of {spec.algo}.Config (total_steps is the SPEC's "
                f"steps); fields: {sorted(fields)}"
            )
    try:
        trial_config(spec, {})
    except ConfigError as e:
        raise ConfigError(f"sweep SPEC config: {e}") from None
    for name, distribution in space.items():
        spec.space[name] = _check_distribution(spec, name, distribution)
    return spec


def _check_distribution(spec: Spec, name: str, distribution: Any) -> dict[str, list]:
    where = f"sweep SPEC space.{name}"
    if not isinstance(distribution, Mapping) or len(distribution) != 1:
        raise ConfigError(
            f"{where} must be one of {{kind: values}} with kind in {list(SPACE_KINDS)}, got {distribution!r}"
        )
    ((kind, values),) = distribution.items()
    if kind not in SPACE_KINDS:
        raise ConfigError(f"{where}: unknown kind {kind!r}; expected one of {list(SPACE_KINDS)}")
    if not isinstance(values, list) or not values:
        raise ConfigError(f"{where}.{kind} is empty: give {'the values' if kind == 'choice' else '[low, high]'}")
    if kind == "choice":
        points = values
    else:
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        if len(values) != 2 or not numbers or not values[0] < values[1]:
            raise ConfigError(f"{where}.{kind} must be [low, high] with low < high, got {values!r}")
        if kind == "int" and not all(isinstance(v, int) for v in values):
            raise ConfigError(f"{where}.int must be two ints, got {values!r}")
        if kind == "log_uniform" and values[0] <= 0:
            raise ConfigError(f"{where}.log_uniform needs low > 0, got {values!r}")
        points = values
    for point in points:  # every end of the range (every choice) must make a valid Config
        try:
            trial_config(spec, {name: point})
        except ConfigError as e:
            raise ConfigError(f"{where}: {point!r} is outside the Config's range: {e}") from None
        except TypeError as e:
            raise ConfigError(f"{where}: {point!r} is not a valid value: {e}") from None
    return {kind: list(values)}


# ---------------------------------------------------------------- one trial


def _curve_value(run: Any) -> float | None:
    """The recent training return (mean of the last 5 finished episodes), or None if none yet."""
    returns = run.history.recent_returns(5)
    return float(np.mean(returns)) if len(returns) else None


def run_trial(
    spec: Spec,
    params: Mapping[str, Any],
    report_curve: Callable[[int, float], None] | None = None,
    seconds: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Train the trial's config once per seed and evaluate it. ``report_curve(step, value)``
    is called after every chunk with the recent training return (step counts across seeds);
    it may raise to stop the trial (pruning). Returns the objective and its parts; ``seconds``,
    if given, accumulates compile_seconds and train_seconds as the seeds run (so a pruned
    trial's are known too)."""
    from .algorithms import ALGORITHMS
    from .devices import device_from_name
    from .training import evaluate
    from .training.driver import train

    algo, config, device = ALGORITHMS[spec.algo], trial_config(spec, params), device_from_name(spec.device)
    records = []
    seconds = {} if seconds is None else seconds
    seconds["compile_seconds"] = 0.0
    for index, seed in enumerate(spec.seeds):
        first = [True]

        def hook(run: Any, offset: int = index * spec.steps, first: list = first) -> None:
            if first[0]:  # known from the first chunk on, so a pruned trial's count too
                first[0] = False
                seconds["compile_seconds"] += run.compile_seconds
            if report_curve is not None:
                value = _curve_value(run)
                if value is not None:
                    report_curve(offset + run.steps, value)

        result = train(algo, device, spec.env, config, seed=seed, progress=False, hooks=(hook,))
        curve = result.history["returns"]
        eval_return = evaluate(result.policy, result.spec.eval_id)[0] if spec.objective == "eval_return" else math.nan
        records.append(
            {
                "eval_return": eval_return,
                "auc": float(np.mean(curve)) if len(curve) else math.nan,
                "compile_seconds": result.compile_seconds,
                "train_seconds": result.train_seconds,
            }
        )
    summary = {key: float(np.mean([r[key] for r in records])) for key in ("eval_return", "auc")}
    summary["compile_seconds"] = float(sum(r["compile_seconds"] for r in records))
    summary["train_seconds"] = float(sum(r["train_seconds"] for r in records))
    summary["objective"] = summary[spec.objective]
    if not math.isfinite(summary["objective"]):
        raise ValueError(f"the objective {spec.objective} is {summary['objective']} (no finished episode?)")
    return summary


# ---------------------------------------------------------------- optuna


def _optuna() -> Any:
    try:
        import optuna
    except ImportError:
        raise ConfigError("dispatchrl sweep needs optuna: pip install 'dispatchrl[sweep]'") from None
    return optuna


def _distributions(spec: Spec) -> dict[str, Any]:
    optuna = _optuna()
    made = {}
    for name, distribution in spec.space.items():
        ((kind, values),) = distribution.items()
        if kind == "uniform":
            made[name] = optuna.distributions.FloatDistribution(values[0], values[1])
        elif kind == "log_uniform":
            made[name] = optuna.distributions.FloatDistribution(values[0], values[1], log=True)
        elif kind == "int":
            made[name] = optuna.distributions.IntDistribution(values[0], values[1])
        else:  # choices stored as JSON text: lists (hidden sizes) are not Optuna choice values
            made[name] = optuna.distributions.CategoricalDistribution([json.dumps(v) for v in values])
    return made


def _suggest(trial: Any, name: str, distribution: Any) -> Any:
    optuna = _optuna()
    if isinstance(distribution, optuna.distributions.CategoricalDistribution):
        return trial.suggest_categorical(name, distribution.choices)
    if isinstance(distribution, optuna.distributions.IntDistribution):
        return trial.suggest_int(name, distribution.low, distribution.high)
    return trial.suggest_float(name, distribution.low, distribution.high, log=distribution.log)


def _decode(spec: Spec, params: Mapping[str, Any]) -> dict[str, Any]:
    return {k: json.loads(v) if "choice" in spec.space[k] else v for k, v in params.items()}


def _storage(out: Path) -> Any:
    optuna = _optuna()
    return optuna.storages.RDBStorage(f"sqlite:///{out / 'study.db'}", engine_kwargs={"connect_args": {"timeout": 120}})


def _sampler_seed(spec: Spec, worker: int, drawn: int) -> int:
    """The sampler's seed for a pool process that joins a study already holding ``drawn`` trials:
    ``sampler_seed + worker`` for a new study, else one derived from the history too, so a resumed
    study does not restart the sampler's sequence and draw its first configurations again."""
    if drawn == 0:
        return spec.sampler_seed + worker
    return int(np.random.SeedSequence([spec.sampler_seed, worker, drawn]).generate_state(1)[0])


def _load_study(spec: Spec, out: Path, worker: int = 0) -> Any:
    """The study, with a TPE sampler seeded per pool process (so processes sample apart) and by
    the number of trials it holds (so a resumed study draws new configurations)."""
    optuna = _optuna()
    study = optuna.load_study(study_name=STUDY, storage=_storage(out))
    study.sampler = optuna.samplers.TPESampler(seed=_sampler_seed(spec, worker, len(study.trials)))
    # the first half of a curve is mostly warm-up noise: judge trials on the second half only
    if spec.prune:
        study.pruner = optuna.pruners.MedianPruner(n_startup_trials=4, n_warmup_steps=spec.steps // 2)
    else:
        study.pruner = optuna.pruners.NopPruner()
    return study


def _counted(study: Any) -> int:
    """Trials finished or running, interrupted ones (resumed under a new number) left out."""
    states = study.trials
    return sum(1 for t in states if t.user_attrs.get("error") != "interrupted")


def _objective(spec: Spec) -> Callable[[Any], float]:
    optuna = _optuna()
    distributions = _distributions(spec)

    def objective(trial: Any) -> float:
        params = _decode(spec, {name: _suggest(trial, name, d) for name, d in distributions.items()})
        start, seconds = time.perf_counter(), {"compile_seconds": 0.0}

        def report_curve(step: int, value: float) -> None:
            trial.report(value, step)
            if trial.should_prune():
                raise optuna.TrialPruned(f"pruned at step {step} (training return {value:.1f})")

        try:
            result = run_trial(spec, params, report_curve if spec.prune else None, seconds)
        except BaseException as e:  # pruned, or failed: recorded with the trial; the study goes on
            if not isinstance(e, optuna.TrialPruned):
                trial.set_user_attr("error", f"{type(e).__name__}: {e}")
            trial.set_user_attr("compile_seconds", seconds["compile_seconds"])
            trial.set_user_attr("wall_seconds", time.perf_counter() - start)
            raise
        for key, value in result.items():
            trial.set_user_attr(key, value)
        trial.set_user_attr("wall_seconds", time.perf_counter() - start)
        return result["objective"]

    return objective


def _worker(spec_json: dict[str, Any], out: str, index: int = 0) -> int:
    """One pool process: run trials until the study holds ``spec.trials``; returns how many ran here."""
    spec = parse_spec(spec_json)
    study = _load_study(spec, Path(out), index)
    objective = _objective(spec)
    optuna = _optuna()
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # _trial_logger says it (failures too) with the SPEC's values
    ran = 0
    try:
        while _counted(study) < spec.trials:
            study.optimize(objective, n_trials=1, catch=(Exception,), callbacks=[_trial_logger(spec)])
            ran += 1
    finally:
        optuna.logging.set_verbosity(verbosity)
    return ran


def _trial_logger(spec: Spec) -> Callable[[Any, Any], None]:
    """A study callback printing each finished trial with its parameters as the SPEC wrote them
    (Optuna's own line shows choices as the JSON text they are stored as: ``'64'``)."""

    def log(study: Any, trial: Any) -> None:
        params = _decode(spec, {k: v for k, v in trial.params.items() if k in spec.space})
        if trial.state.name == "COMPLETE":
            outcome = f"{spec.objective} {trial.value:.6g}"
        elif trial.state.name == "PRUNED":
            outcome = "pruned"
        else:
            outcome = f"failed: {trial.user_attrs.get('error', '')}"
        print(f"dispatchrl sweep: trial {trial.number} {outcome}; parameters {params}", file=sys.stderr, flush=True)

    return log


def _warm(spec: Spec) -> float:
    """Compile (or load) the step of the space's first point once in this process, so the pool's
    processes load it from the disk cache instead of each compiling it; returns the seconds."""
    from .algorithms import ALGORITHMS
    from .devices import device_from_name
    from .training.driver import train

    params = {}
    for name, distribution in spec.space.items():
        params[name] = next(iter(distribution.values()))[0]
    config = trial_config(spec, params)
    envs = getattr(config, "num_envs", 1)
    if hasattr(config, "steps_per_env"):  # on-policy: one rollout
        steps = envs * config.steps_per_env
    else:  # off-policy: past the warm-up, so the update runs too
        steps = max(envs, getattr(config, "warmup_steps", 0) + 2 * envs)
    steps = min(spec.steps, steps)
    start = time.perf_counter()
    try:
        short = dataclasses.replace(config, total_steps=steps)
        train(ALGORITHMS[spec.algo], device_from_name(spec.device), spec.env, short, seed=0, progress=False)
    except Exception:  # warming is an optimisation: a failing config fails in its trial
        pass
    return time.perf_counter() - start


def _run_optuna(spec: Spec, out: Path, workers: int) -> None:
    ahead = spec.trials - _counted(_load_study(spec, out))
    workers = max(1, min(workers, ahead))
    if ahead <= 0:
        return
    if workers == 1:
        _worker(spec.to_json(), str(out))
        return
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        for future in [pool.submit(_worker, spec.to_json(), str(out), i) for i in range(workers)]:
            future.result()


# ---------------------------------------------------------------- ray


def _run_ray(spec: Spec, out: Path, address: str | None, workers: int, verbose: bool = False) -> None:
    """The same trials as Ray Tune trials (OptunaSearch, TPE), each a Ray task with one core;
    finished trials are written into the same Optuna study, so the outputs are the same. Ray's
    own log stays at errors (its start-up notices, the token-authentication one included, are
    warnings printed on every sweep) unless ``verbose``."""
    try:
        import ray
        from ray import tune
        from ray.tune.search.optuna import OptunaSearch
    except ImportError:
        raise ConfigError("dispatchrl sweep --engine ray needs Ray Tune: pip install 'dispatchrl[ray]'") from None
    optuna = _optuna()
    study = _load_study(spec, out)
    ahead = spec.trials - _counted(study)
    if ahead <= 0:
        return
    if not ray.is_initialized():
        level = logging.INFO if verbose else logging.ERROR
        for name in ("ray", _RAY_AUTH_LOGGER):  # the notice's own logger too, in case it has a level of its own
            logging.getLogger(name).setLevel(level)
        if address:
            ray.init(address=address, logging_level=level)
        else:
            ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, logging_level=level)
    distributions = _distributions(spec)
    spec_json = spec.to_json()

    def trainable(params: dict[str, Any]) -> dict[str, Any]:
        spec = parse_spec(spec_json)
        start = time.perf_counter()
        try:
            record = run_trial(spec, _decode(spec, params))
        except Exception as e:  # a failing trial is a record too
            return {
                "objective": float("nan"),
                "error": f"{type(e).__name__}: {e}",
                "wall_seconds": time.perf_counter() - start,
            }
        return {**record, "error": "", "wall_seconds": time.perf_counter() - start}

    seed = _sampler_seed(spec, 0, len(study.trials))  # resumed: continue, not repeat, the draws
    search = OptunaSearch(space=distributions, metric="objective", mode="max", seed=seed)
    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": 1}),
        tune_config=tune.TuneConfig(search_alg=search, num_samples=ahead, max_concurrent_trials=workers),
        run_config=tune.RunConfig(storage_path=str((out / "ray").resolve()), name="study", verbose=0),
    )
    results = tuner.fit()
    for result in (results[i] for i in range(len(results))):
        metrics, params = result.metrics or {}, result.config or {}
        error = metrics.get("error") or (repr(result.error) if result.error else "")
        value = metrics.get("objective", math.nan)
        ok = not error and math.isfinite(value)
        attrs: dict[str, Any] = {
            k: metrics[k]
            for k in ("eval_return", "auc", "compile_seconds", "train_seconds", "wall_seconds")
            if k in metrics
        }
        if error:
            attrs["error"] = error
        study.add_trial(
            optuna.trial.create_trial(
                params=params,
                distributions={k: distributions[k] for k in params},
                value=value if ok else None,
                state=optuna.trial.TrialState.COMPLETE if ok else optuna.trial.TrialState.FAIL,
                user_attrs=attrs,
            )
        )


# ---------------------------------------------------------------- outputs


def _records(spec: Spec, study: Any) -> list[dict[str, Any]]:
    rows = []
    for t in study.trials:
        row = {
            "number": t.number,
            "state": t.state.name,
            "objective": t.value,
            **{
                k: t.user_attrs.get(k)
                for k in ("eval_return", "auc", "compile_seconds", "train_seconds", "wall_seconds")
            },
            "error": t.user_attrs.get("error", ""),
        }
        params = _decode(spec, {k: v for k, v in t.params.items() if k in spec.space})
        row.update({f"param_{k}": json.dumps(v) if isinstance(v, list) else v for k, v in params.items()})
        rows.append(row)
    return rows


def _write_outputs(spec: Spec, out: Path, warm_seconds: float, wall_seconds: float) -> dict[str, Any]:
    import csv
    import io

    study = _load_study(spec, out)
    rows = _records(spec, study)
    columns = list(dict.fromkeys(k for row in rows for k in row))
    text = io.StringIO()
    writer = csv.DictWriter(text, columns)
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(out / "trials.csv", text.getvalue())
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    summary: dict[str, Any] = {
        "trials": len(rows),
        "complete": len(complete),
        "pruned": sum(r["state"] == "PRUNED" for r in rows),
        "failed": sum(r["state"] == "FAIL" for r in rows),
        "wall_seconds": round(wall_seconds, 3),
        "warm_compile_seconds": round(warm_seconds, 3),
        "trial_compile_seconds": [
            None if r["compile_seconds"] is None else round(r["compile_seconds"], 4) for r in rows
        ],
    }
    if complete:
        best = max(complete, key=lambda t: t.value)
        config = trial_config(spec, _decode(spec, best.params))
        flat = {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(config).items()}
        atomic_write_text(out / "best_config.json", json.dumps(flat, indent=1) + "\n")
        summary.update(best_trial=best.number, best_objective=best.value, best_params=_decode(spec, best.params))
    failed = [r for r in rows if r["state"] == "FAIL" and r["error"] != "interrupted"]
    if failed and len(failed) == len(rows) - sum(r["error"] == "interrupted" for r in rows):
        summary["status"] = "failed"
        summary["error"] = f"every trial failed ({len(failed)} of {len(failed)}); the first: {failed[0]['error']}"
    else:
        summary["status"] = "ok"
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=1) + "\n")
    return summary


def check_summary(summary: Mapping[str, Any], out: str | Path) -> None:
    """ConfigError when the study's every trial failed (nothing was learned about the space)."""
    if summary.get("status") == "failed":
        raise ConfigError(f"sweep --out {str(out)!r}: {summary['error']} (every trial's error is in trials.csv)")


def sweep(
    spec: Spec,
    out: str | Path,
    engine: str = "optuna",
    resume: bool = False,
    workers: int | None = None,
    address: str | None = None,
    verbose: bool = False,
) -> dict[str, Any]:
    """Run (or with ``resume`` continue) the study of ``spec`` under ``out``; returns the summary
    also written to ``out/summary.json``. A study whose every trial failed says so in the summary
    (``status`` "failed" and the first error) and is refused by :func:`check_summary`."""
    optuna = _optuna()
    if engine not in ("optuna", "ray"):
        raise ConfigError(f"sweep engine must be 'optuna' or 'ray', got {engine!r}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    workers = workers or spec.workers or os.cpu_count() or 1
    exists = (out / "study.db").exists()
    if exists and not resume:
        raise ConfigError(
            f"sweep --out {str(out)!r} already holds a study: pass --resume to continue it, or a new --out"
        )
    if resume and not exists:
        raise ConfigError(f"sweep --resume: no study in {str(out)!r} (study.db) to continue")
    start = time.perf_counter()
    if not exists:
        study = optuna.create_study(study_name=STUDY, storage=_storage(out), direction="maximize")
        study.set_user_attr("spec", spec.to_json())
    else:
        study = optuna.load_study(study_name=STUDY, storage=_storage(out))
        saved = study.user_attrs.get("spec", {})
        for key in ("algo", "env", "steps", "seeds", "objective", "space", "config", "device"):
            if saved.get(key) != spec.to_json()[key]:
                raise ConfigError(f"sweep --resume: the SPEC's {key} differs from the study's ({saved.get(key)!r})")
        study.set_user_attr("spec", spec.to_json())
        _requeue_interrupted(study)
    warm_seconds = _warm(spec)
    if engine == "optuna":
        _run_optuna(spec, out, workers)
    else:
        _run_ray(spec, out, address, workers, verbose)
    return _write_outputs(spec, out, warm_seconds, time.perf_counter() - start)


def _requeue_interrupted(study: Any) -> None:
    """Trials a killed study left RUNNING are marked failed ("interrupted") and their parameters
    queued again, so the resumed study runs them first."""
    optuna = _optuna()
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        study._storage.set_trial_user_attr(t._trial_id, "error", "interrupted")
        study._storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL)
        study.enqueue_trial(t.params, skip_if_exists=False)


def report(out: str | Path, top: int = 5, stream: Any = None) -> dict[str, Any]:
    """Print the best trials and each hyperparameter's effect (Spearman correlation of its value
    with the objective over complete trials); plot both to ``out/report.png`` if matplotlib is
    installed. Returns what it printed."""
    stream = stream or sys.stdout
    out = Path(out)
    optuna = _optuna()
    study = optuna.load_study(study_name=STUDY, storage=_storage(out))
    spec = parse_spec(study.user_attrs["spec"])
    complete = sorted((t for t in study.trials if t.state.name == "COMPLETE"), key=lambda t: -t.value)
    best = [{"number": t.number, "objective": t.value, **_decode(spec, t.params)} for t in complete[:top]]
    effects = {}
    for name in spec.space:
        points = [(t.params[name], t.value) for t in complete if name in t.params]
        if len(points) < 3:
            continue
        values = [p[0] for p in points]
        if "choice" in spec.space[name]:  # rank choices by their order in the SPEC
            order = [json.dumps(v) for v in spec.space[name]["choice"]]
            values = [order.index(v) for v in values]
        x, y = _ranks(np.asarray(values, float)), _ranks(np.asarray([p[1] for p in points], float))
        effects[name] = float(np.corrcoef(x, y)[0, 1]) if np.std(x) > 0 and np.std(y) > 0 else 0.0
    print(f"{len(complete)} complete of {len(study.trials)} trials; best:", file=stream)
    for row in best:
        print("  " + json.dumps(row), file=stream)
    print("effect (Spearman correlation with the objective):", file=stream)
    for name, rho in sorted(effects.items(), key=lambda kv: -abs(kv[1])):
        print(f"  {name:>24}: {rho:+.2f}", file=stream)
    _plot(out, spec, complete)
    return {"best": best, "effects": effects}


def _ranks(values: np.ndarray) -> np.ndarray:
    """Ranks from 0, tied values sharing the mean of their ranks (as Spearman's rho needs: a
    choice parameter's values are mostly ties)."""
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    return ((ends - counts + ends - 1) / 2)[inverse.ravel()]


def _plot(out: Path, spec: Spec, complete: list) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig = _report_figure(spec, complete)
    fig.savefig(out / "report.png", dpi=80)
    plt.close(fig)


def _report_figure(spec: Spec, complete: list) -> Any:
    """The objective by trial number (integer ticks), then by each parameter: a choice's axis
    has one tick per choice, labelled with the SPEC's value."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    names = list(spec.space)
    fig, axes = plt.subplots(1, len(names) + 1, figsize=(4 * (len(names) + 1), 3.2), squeeze=False)
    numbers = sorted(complete, key=lambda t: t.number)
    axes[0][0].plot([t.number for t in numbers], [t.value for t in numbers], "o")
    axes[0][0].set(xlabel="trial", ylabel=spec.objective)
    axes[0][0].xaxis.set_major_locator(MaxNLocator(integer=True))
    for ax, name in zip(axes[0][1:], names, strict=True):
        points = [t for t in complete if name in t.params]
        if "choice" in spec.space[name]:
            choices = spec.space[name]["choice"]
            order = [json.dumps(v) for v in choices]
            ax.plot([order.index(t.params[name]) for t in points], [t.value for t in points], "o")
            ax.set_xticks(range(len(choices)), [str(v) for v in choices])
            ax.set_xlim(-0.5, len(choices) - 0.5)
            ax.set(xlabel=name)
        else:
            ax.plot([t.params[name] for t in points], [t.value for t in points], "o")
            ax.set(xlabel=name, xscale="log" if "log_uniform" in spec.space[name] else "linear")
            if "int" in spec.space[name]:
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    return fig
