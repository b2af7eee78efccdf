"""Learning curves from ``--log-dir`` runs (``dispatchrl plot``), drawn with matplotlib.

Each directory given is a run (it holds ``progress.csv``) or a folder searched for runs. Runs of
the same algorithm, env and config (``run.json``, ``config.json``) are seeds of one experiment:
one curve, their mean, with a band from their minimum to their maximum, over env steps.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .errors import ConfigError
from .loggers import CONFIG_JSON, PROGRESS_CSV, read_progress

__all__ = ["Curve", "find_runs", "learning_curves", "plot_runs"]

INSTALL_HINT = 'dispatchrl plot needs matplotlib: pip install "dispatchrl[plot]"'


def find_runs(paths: Sequence[str | Path]) -> list[Path]:
    """The run directories (holding ``progress.csv``) at or under ``paths``, in order."""
    runs: list[Path] = []
    for path in map(Path, paths):
        if (path / PROGRESS_CSV).is_file():
            runs.append(path)
        elif path.is_dir():
            runs += sorted(p.parent for p in path.rglob(PROGRESS_CSV))
        else:
            raise ConfigError(f"plot: {path} is not a run directory (no {PROGRESS_CSV}) nor a folder of runs")
    if not runs:
        raise ConfigError(f"plot: no {PROGRESS_CSV} found under {[str(p) for p in paths]}")
    return list(dict.fromkeys(runs))


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


class Curve:
    """One experiment's runs of one metric on a common step grid: ``steps``, ``mean``, ``low``,
    ``high`` (over runs), ``label``."""

    def __init__(self, label: str, series: list[tuple[np.ndarray, np.ndarray]]) -> None:
        last = min(s[-1] for s, _ in series)  # the steps every run reached
        steps = np.unique(np.concatenate([s[s <= last] for s, _ in series]))
        values = np.stack([np.interp(steps, s, v) for s, v in series])
        self.label, self.runs, self.steps = label, len(series), steps
        self.mean, self.low, self.high = values.mean(axis=0), values.min(axis=0), values.max(axis=0)


def learning_curves(paths: Sequence[str | Path], metric: str = "episode_return", smooth: int = 1) -> list[Curve]:
    """The curves of ``metric`` of the runs under ``paths``, seeds of one experiment averaged;
    ``smooth``: a running mean over that many consecutive values of each run first."""
    if smooth < 1:
        raise ConfigError(f"plot: --smooth must be a positive int, got {smooth}")
    groups: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    described: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    for run in find_runs(paths):
        rows = [r for r in read_progress(run) if metric in r]
        if not rows:
            columns = sorted({k for r in read_progress(run) for k in r} - {"step", "time"})
            raise ConfigError(f"plot: run {run} has no {metric!r} values; its metrics are {columns}")
        steps, values = np.array([r["step"] for r in rows]), np.array([r[metric] for r in rows])
        if smooth > 1 and len(values) >= smooth:
            values = np.convolve(values, np.ones(smooth) / smooth, mode="valid")
            steps = steps[smooth - 1 :]
        info, config = _read_json(run / "run.json"), _read_json(run / CONFIG_JSON)
        key = json.dumps([info.get("algo"), info.get("env"), config], sort_keys=True)
        groups.setdefault(key, []).append((steps, values))
        described[key] = (info, config)
    return [Curve(_label(described[key], list(described.values())), series) for key, series in groups.items()]


def _label(this: tuple[dict[str, Any], dict[str, Any]], every: list[tuple[dict[str, Any], dict[str, Any]]]) -> str:
    """``TD3 pendulum``, plus the config fields in which the experiments differ."""
    info, config = this
    label = f"{str(info.get('algo', 'run')).upper()} {info.get('env', '')}".strip()
    differing = sorted(k for k in config if any(other.get(k) != config[k] for _, other in every))
    return label + "".join(f" {k}={config[k]}" for k in differing)


def plot_runs(
    paths: Sequence[str | Path],
    out: str | Path = "curve.png",
    metric: str = "episode_return",
    smooth: int = 1,
    title: str | None = None,
) -> Path:
    """Draw the learning curves of the runs under ``paths`` into image ``out`` (PNG, SVG, PDF:
    by its suffix): per experiment the mean over seeds and a min–max band, env steps on x."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ConfigError(INSTALL_HINT) from None
    curves = learning_curves(paths, metric, smooth)
    figure = Figure(figsize=(7, 4.2), dpi=110)
    FigureCanvasAgg(figure)  # no pyplot: no global state, no display needed
    axes = figure.add_subplot()
    for curve in curves:
        seeds = f" ({curve.runs} seeds)" if curve.runs > 1 else ""
        (line,) = axes.plot(curve.steps, curve.mean, label=curve.label + seeds, linewidth=1.6)
        if curve.runs > 1:
            axes.fill_between(curve.steps, curve.low, curve.high, color=line.get_color(), alpha=0.25, linewidth=0)
    axes.set_xlabel("environment steps")
    axes.set_ylabel(metric.replace("_", " "))
    axes.grid(alpha=0.3)
    axes.legend(loc="best", fontsize="small")
    if title:
        axes.set_title(title)
    figure.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out)
    return out
