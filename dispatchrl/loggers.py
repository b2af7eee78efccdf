"""Metrics logging: backends (CSV, TensorBoard, Weights & Biases) and the driver hook feeding them.

The hook (:class:`MetricsHook`) runs at chunk boundaries, where the loop already returns to Python,
so logging adds nothing inside the fused step. Each boundary writes one row per episode finished
since the last one (``episode_return``, ``episode_length`` at the env step it ended) and one row
for the chunk: ``steps_per_second`` over training only (from the moment the fused steps were
built, so compilation is excluded) and the learner scalars (:func:`learner_scalars`): TD3's and
SAC's critic loss, mean Q and actor loss (SAC: and entropy) averaged over the updates since the
previous row, summed on the device inside the fused step; SAC's α; PPO's KL, surrogate loss,
entropy, clip fraction of the last minibatch, learning rate and explained variance, one row per
iteration.

Every backend writes under one run directory: ``progress.csv`` and ``config.json`` (the Config's
fields, loadable with ``dispatchrl train ALGO --config DIR/config.json``), TensorBoard event files
with the same tags as the CSV columns, or a W&B run.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import socket
import struct
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from .arrays import to_numpy
from .errors import ConfigError

__all__ = [
    "BACKENDS",
    "CSVLogger",
    "Logger",
    "MetricsHook",
    "MultiLogger",
    "TensorBoardLogger",
    "WandbLogger",
    "accumulated",
    "config_dict",
    "learner_scalars",
    "make_logger",
    "read_progress",
]

#: the file names every run directory holds
PROGRESS_CSV, CONFIG_JSON = "progress.csv", "config.json"


def config_dict(config: Any) -> dict[str, Any]:
    """A Config's fields as JSON-ready values (tuples become lists)."""
    return {f.name: _jsonable(getattr(config, f.name)) for f in dataclasses.fields(config)}


def _jsonable(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


class Logger:
    """A metrics backend. ``start`` once per run (the run's description and Config fields),
    ``write`` rows of scalars at an env step, ``flush`` at the end of each ``train`` call (a
    logger may be passed to several calls continuing one run), ``close`` when done with it."""

    def start(self, run: Mapping[str, Any], config: Mapping[str, Any]) -> None:
        pass

    def write(self, step: int, scalars: Mapping[str, float]) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.flush()


class CSVLogger(Logger):
    """``DIR/progress.csv``: columns ``step``, ``time`` (seconds since the logger was made), then
    each scalar in the order first seen; a row leaves the scalars it does not have empty. A new
    scalar rewrites the file with the wider header. ``DIR/config.json``: the Config's fields."""

    def __init__(self, log_dir: str | Path, append: bool = False) -> None:
        self.dir = Path(log_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / PROGRESS_CSV
        self.columns: list[str] = ["step", "time"]
        self.pending: list[dict[str, str]] = []
        self.created = time.perf_counter()
        if append and self.path.is_file():  # a resumed run continues its log
            with open(self.path, newline="") as f:
                self.columns = next(csv.reader(f), []) or self.columns
        else:
            self.path.write_text(",".join(self.columns) + "\n")

    def start(self, run: Mapping[str, Any], config: Mapping[str, Any]) -> None:
        (self.dir / CONFIG_JSON).write_text(json.dumps(dict(config), indent=2) + "\n")
        (self.dir / "run.json").write_text(json.dumps(dict(run), indent=2) + "\n")

    def write(self, step: int, scalars: Mapping[str, float]) -> None:
        row = {"step": str(int(step)), "time": f"{time.perf_counter() - self.created:.4f}"}
        row.update((k, _cell(v)) for k, v in scalars.items())
        self.pending.append(row)

    def flush(self) -> None:
        if not self.pending:
            return
        new = [k for row in self.pending for k in row if k not in self.columns]
        if new:
            self.columns += list(dict.fromkeys(new))
            rows = read_progress(self.path, raw=True)
            with open(self.path, "w", newline="") as f:
                writer = csv.DictWriter(f, self.columns, restval="")
                writer.writeheader()
                writer.writerows(rows)
        with open(self.path, "a", newline="") as f:
            csv.DictWriter(f, self.columns, restval="").writerows(self.pending)
        self.pending = []


def _cell(value: float) -> str:
    """An int as an int; a float by repr, which round-trips float64 exactly."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return str(int(value))
    return repr(float(value))


class TensorBoardLogger(Logger):
    """TensorBoard event files under ``DIR`` (tensorboardX's protocol buffers: no torch or
    TensorFlow needed): one event per row holding all its scalars, tags as the CSV columns; the
    config as text. Rows are buffered and written at :meth:`flush`, synchronously and without
    fsync (tensorboardX's own writer runs a thread per file and fsyncs each flush: over 2% of a
    short TD3 run on a loaded 2-core machine)."""

    def __init__(self, log_dir: str | Path) -> None:
        try:
            from tensorboardX.proto.event_pb2 import Event
            from tensorboardX.proto.summary_pb2 import Summary
            from tensorboardX.record_writer import masked_crc32c
        except ImportError:
            raise ConfigError(
                'the tensorboard logger needs tensorboardX: pip install "dispatchrl[tensorboard]"'
            ) from None
        self.Event, self.Summary, self.crc = Event, Summary, masked_crc32c
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        name = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{os.getpid()}.dispatchrl"
        self.file: IO[bytes] | None = open(Path(log_dir) / name, "ab")  # closed by close()
        self.pending: list[bytes] = [Event(wall_time=time.time(), file_version="brain.Event:2").SerializeToString()]

    def start(self, run: Mapping[str, Any], config: Mapping[str, Any]) -> None:
        text = "```\n" + json.dumps({**run, **config}, indent=2) + "\n```"
        value = self.Summary.Value(tag="config/text_summary")
        value.metadata.plugin_data.plugin_name = "text"
        value.tensor.dtype = 7  # DT_STRING
        value.tensor.string_val.append(text.encode())
        value.tensor.tensor_shape.dim.add(size=1)
        self.pending.append(
            self.Event(wall_time=time.time(), step=0, summary=self.Summary(value=[value])).SerializeToString()
        )

    def write(self, step: int, scalars: Mapping[str, float]) -> None:
        values = [self.Summary.Value(tag=k, simple_value=float(v)) for k, v in scalars.items()]
        event = self.Event(wall_time=time.time(), step=int(step), summary=self.Summary(value=values))
        self.pending.append(event.SerializeToString())

    def flush(self) -> None:
        if self.file is None or not self.pending:
            return
        records = []
        for data in self.pending:  # TFRecord framing: length, its masked CRC-32C, data, its CRC
            header = struct.pack("<Q", len(data))
            records += [header, struct.pack("<I", self.crc(header)), data, struct.pack("<I", self.crc(data))]
        self.file.write(b"".join(records))
        self.file.flush()
        self.pending = []

    def close(self) -> None:
        self.flush()
        if self.file is not None:
            self.file.close()
            self.file = None


class WandbLogger(Logger):
    """A Weights & Biases run (``pip install wandb``); ``init`` goes to ``wandb.init``."""

    def __init__(self, log_dir: str | Path | None = None, **init: Any) -> None:
        try:
            import wandb
        except ImportError:
            raise ConfigError('the wandb logger needs wandb: pip install "dispatchrl[wandb]"') from None
        self.wandb, self.init, self.dir = wandb, init, log_dir
        self.active: Any = None

    def start(self, run: Mapping[str, Any], config: Mapping[str, Any]) -> None:
        if self.active is None:
            options = {"dir": str(self.dir) if self.dir is not None else None, **self.init}
            self.active = self.wandb.init(config={**run, **config}, **options)

    def write(self, step: int, scalars: Mapping[str, float]) -> None:
        if self.active is not None:
            self.active.log(dict(scalars), step=int(step))

    def close(self) -> None:
        if self.active is not None:
            self.active.finish()
            self.active = None


class MultiLogger(Logger):
    """Several backends as one."""

    def __init__(self, loggers: Sequence[Logger]) -> None:
        self.loggers = list(loggers)

    def start(self, run: Mapping[str, Any], config: Mapping[str, Any]) -> None:
        for logger in self.loggers:
            logger.start(run, config)

    def write(self, step: int, scalars: Mapping[str, float]) -> None:
        for logger in self.loggers:
            logger.write(step, scalars)

    def flush(self) -> None:
        for logger in self.loggers:
            logger.flush()

    def close(self) -> None:
        for logger in self.loggers:
            logger.close()


#: backend name (``--logger``) → class, each made with the run directory
BACKENDS: dict[str, Callable[[str | Path], Logger]] = {
    "csv": CSVLogger,
    "tensorboard": TensorBoardLogger,
    "wandb": WandbLogger,
}


def make_logger(names: str | Sequence[str], log_dir: str | Path, append: bool = False) -> Logger:
    """The backends named (``"csv,tensorboard"`` or a list) writing under ``log_dir``;
    ``append``: continue an existing ``progress.csv`` (a resumed run) instead of starting it anew."""
    wanted = [n.strip() for n in (names.split(",") if isinstance(names, str) else names) if n.strip()]
    unknown = [n for n in wanted if n not in BACKENDS]
    if unknown or not wanted:
        raise ConfigError(f"logger: expected a comma-separated list of {sorted(BACKENDS)}, got {names!r}")
    loggers = [CSVLogger(log_dir, append) if n == "csv" else BACKENDS[n](log_dir) for n in dict.fromkeys(wanted)]
    return loggers[0] if len(loggers) == 1 else MultiLogger(loggers)


#: the hook flushes the backends at least this often (and when the run ends)
FLUSH_SECONDS = 5.0

#: PPO's update_stats (float64 (4,)), in order
_PPO_STATS = ("kl", "surrogate_loss", "entropy", "clip_fraction")
#: TD3/SAC running sums (float64, the update count first; see td3.State): field → the scalars
#: after the count, each logged as its mean over the updates since the last row
_ACCUMULATED = {"critic_stats": ("critic_loss", "q_mean"), "actor_stats": ("actor_loss", "entropy")}


def accumulated(state: Any) -> dict[str, np.ndarray]:
    """Host copies of the state's running learner sums (TD3/SAC; empty for PPO)."""
    return {f: to_numpy(getattr(state, f)).copy() for f in _ACCUMULATED if getattr(state, f, None) is not None}


def learner_scalars(state: Any, since: Mapping[str, np.ndarray] | None = None) -> dict[str, float]:
    """The learner scalars the state holds (one small copy each): PPO's last-minibatch
    statistics, learning rate and the explained variance of its last rollout; SAC's temperature
    α; and TD3's and SAC's critic loss, mean Q, actor loss (and SAC's entropy) as means over the
    updates the fused step accumulated since ``since`` (an earlier :func:`accumulated`; None:
    since the run began). A quantity with no update in that span is left out."""
    scalars: dict[str, float] = {}
    stats = getattr(state, "update_stats", None)
    if stats is not None:
        scalars.update(zip(_PPO_STATS, (float(v) for v in to_numpy(stats))))
    lr = getattr(state, "learning_rate", None)
    if lr is not None:
        scalars["learning_rate"] = float(to_numpy(lr)[0])
    ev = getattr(state, "explained_variance", None)
    if ev is not None:
        scalars["explained_variance"] = float(to_numpy(ev)[0])
    log_alpha = getattr(state, "log_alpha", None)
    if log_alpha is not None:
        scalars["alpha"] = math.exp(float(to_numpy(log_alpha.value)[0]))
    for field, sums in accumulated(state).items():
        before = None if since is None else since.get(field)
        span = sums if before is None else sums - before
        if span[0] > 0:
            scalars.update(zip(_ACCUMULATED[field], (float(v) for v in span[1:] / span[0])))
    return scalars


class MetricsHook:
    """Driver hook: after each chunk, a row per newly finished episode, then the chunk's row
    (training-only steps/s and the learner scalars) into ``logger``; flushes when the run ends."""

    def __init__(self, logger: Logger) -> None:
        self.logger = logger
        self.logged: int | None = None  # episodes already written (None: not started)
        self.sums: dict[str, np.ndarray] = {}  # the learner sums at the last row
        self.flushed = time.perf_counter()

    def period(self, run: Any) -> int:
        """Iterations between rows: every iteration where it has its own updates (PPO: one row
        per rollout and update); else 0, the driver's chunks (TD3/SAC)."""
        return 1 if run.schedule.updates else 0

    def begin(self, run: Any) -> None:
        """The loop starts (the driver calls this once the fused steps are built): describe the
        run to the backends (``config.json``); a resumed run's earlier episodes were logged then."""
        self.logged = len(run.history)
        self.sums = accumulated(run.state)
        self.logger.start(
            {"algo": run.algo.NAME, "env": run.spec.name, "seed": run.seed, "device": repr(run.device)},
            config_dict(run.config),
        )

    def __call__(self, run: Any) -> None:
        if self.logged is None:
            self.begin(run)
        assert self.logged is not None
        if len(run.history) > self.logged:  # the episodes finished since the last row
            new = run.history.since(self.logged)
            for end, ret, length in zip(new["steps"], new["returns"], new["lengths"]):
                self.logger.write(int(end), {"episode_return": ret, "episode_length": length})
            self.logged = len(run.history)
        scalars = learner_scalars(run.state, self.sums)
        self.sums = accumulated(run.state)
        self.logger.write(run.steps, {"steps_per_second": run.steps_per_second(), **scalars})
        if run.finished or time.perf_counter() - self.flushed > FLUSH_SECONDS:
            self.logger.flush()
            self.flushed = time.perf_counter()


def read_progress(path: str | Path, raw: bool = False) -> list[dict[str, Any]]:
    """The rows of a ``progress.csv`` (a file or its run directory): floats, with missing cells
    left out (``raw``: the cells as strings)."""
    path = Path(path)
    if path.is_dir():
        path = path / PROGRESS_CSV
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if raw:
        return rows
    return [{k: float(v) for k, v in row.items() if v not in ("", None)} for row in rows]
