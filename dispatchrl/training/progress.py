"""The training progress display: a rich spinner while the fused steps compile, then a bar with
steps, training-only steps/s, the recent return and the ETA (terminals and notebooks); a plain
line every ``interval`` seconds when the output is neither (pipes, job schedulers, CI logs).

While the steps compile, a heartbeat thread says what is compiling (kernel i of n, then the fused
step: :data:`dispatchrl.staging.compile_activity`), the seconds elapsed and, after a first run,
the last compile time of the same program, kept in ``compile_times.json`` in dispatchrl's cache
folder (reading or writing it never fails a run)."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

import numpy as np

from ..cache import cache_dir
from ..files import atomic_write_text
from ..staging import compile_activity

__all__ = ["COMPILE_TIMES", "Progress", "recent_return"]

#: the last compile seconds per program (cold: kernels compiled; warm: all from the disk cache)
COMPILE_TIMES = "compile_times.json"


def recent_return(history: Any, episodes: int = 10) -> float | None:
    """Mean return of the last ``episodes`` finished training episodes of a run's
    :class:`~.runs.EpisodeHistory` (None before the first)."""
    returns = history.recent_returns(episodes)
    return float(np.mean(returns)) if len(returns) else None


class Progress:
    """The driver's progress hook. ``enabled``: None shows it (a rich bar on a terminal or in
    Jupyter, plain lines otherwise), False hides it, True shows it even where stderr is not a
    terminal. The driver calls :meth:`compiling` before building the fused steps, :meth:`started`
    once they are built (the rate counts from there: compilation is excluded), then the hook
    after every chunk. ``interval``: seconds between plain lines (the first and last always print);
    ``clock``: the time source, in seconds."""

    def __init__(
        self,
        enabled: bool | None = None,
        stream: IO[str] | None = None,
        interval: float = 10.0,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.enabled, self.stream, self.interval, self.clock = enabled, stream, interval, clock
        self.mode = "off"  # "rich", "plain" or "off", decided when the run starts compiling
        self.bar: Any = None
        self.task: Any = None
        self.train_start: float | None = None  # clock() once the steps were built
        self.start_steps = 0
        self.last_line = -float("inf")
        self.what = ""
        self.key: str | None = None  # names the program in COMPILE_TIMES
        self.compile_start = 0.0
        self.cold_before = 0  # compile_activity.cold_kernels when compiling started
        self.last_times: dict[str, float] = {}  # this program's last compile seconds, cold/warm
        self.heartbeat: threading.Thread | None = None
        self.compiled = threading.Event()

    @property
    def out(self) -> IO[str]:
        return self.stream if self.stream is not None else sys.stderr

    def _choose_mode(self) -> str:
        if self.enabled is False:
            return "off"
        try:
            from rich.console import Console
        except ImportError:  # pragma: no cover - rich is a dependency
            return "plain"
        console = Console(file=self.out)
        if console.is_jupyter:
            try:
                import ipywidgets  # noqa: F401  (rich's live display in notebooks)
            except ImportError:
                return "plain"
            return "rich"
        return "rich" if console.is_terminal else "plain"

    def compiling(self, what: str, key: str | None = None) -> None:
        """Say what is being built (a spinner, or one plain line), then keep saying it: a
        heartbeat thread updates the spinner every second, or prints a plain line every
        ``interval`` seconds. ``key`` names the program for the next run's estimate."""
        self.mode = self._choose_mode()
        self.what, self.key = what, key
        self.compile_start, self.cold_before = self.clock(), compile_activity.cold_kernels
        self.last_times = _read_compile_times().get(key, {}) if key is not None and self.mode != "off" else {}
        if self.mode == "rich":
            from rich.console import Console
            from rich.progress import BarColumn, SpinnerColumn, TextColumn
            from rich.progress import Progress as RichProgress

            self.bar = RichProgress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                # steps done/total once training runs (not "0/?" while compiling)
                TextColumn("{task.fields[count]}"),
                TextColumn("{task.fields[info]}"),
                console=Console(file=self.out),
                refresh_per_second=4,  # the refresh thread shares the cores with training
                transient=False,
            )
            self.bar.start()
            self.task = self.bar.add_task(f"{what}…", total=None, info="", count="")
        elif self.mode == "plain":
            self._print(f"dispatchrl: {what}…")
        if self.mode != "off":
            self.compiled.clear()
            period = 1.0 if self.mode == "rich" else self.interval
            self.heartbeat = threading.Thread(target=self._beat, args=(period,), name="dispatchrl-compile", daemon=True)
            self.heartbeat.start()

    def compile_status(self) -> str:
        """The phase (when a backend reports one), seconds elapsed and the estimate: "kernel
        7/23, 34 s elapsed (101 s last time)"."""
        elapsed = self.clock() - self.compile_start
        phase = compile_activity.phase()
        cold = compile_activity.cold_kernels > self.cold_before
        # before a backend reports, a cold compile cannot be told from a warm one yet: no estimate
        last = self.last_times.get("cold" if cold else "warm") if phase is not None else None
        estimate = f" ({last:.0f} s last time)" if last is not None else ""
        return f"{phase + ', ' if phase else ''}{elapsed:.0f} s elapsed{estimate}"

    def _beat(self, period: float) -> None:
        while not self.compiled.wait(period):
            try:
                status = self.compile_status()
                if self.mode == "rich" and self.bar is not None:
                    self.bar.update(self.task, info=status)
                elif self.mode == "plain":
                    self._print(f"dispatchrl: {self.what}: {status}")
            except Exception:  # a display never fails a run (a closed stream, a stopped bar)
                return

    def _stop_heartbeat(self) -> None:
        self.compiled.set()
        if self.heartbeat is not None and self.heartbeat is not threading.current_thread():
            self.heartbeat.join()
        self.heartbeat = None

    def started(self, run: Any) -> None:
        """The fused steps are built: training (and the rate's clock) starts now."""
        self._stop_heartbeat()
        compile_seconds = self.clock() - self.compile_start
        if self.key is not None and self.mode != "off":
            cold = compile_activity.cold_kernels > self.cold_before
            _record_compile_time(self.key, "cold" if cold else "warm", compile_seconds)
        self.train_start, self.start_steps = self.clock(), run.steps
        if self.mode == "rich":
            self.bar.update(
                self.task,
                description=f"{run.algo.NAME.upper()} {run.spec.name}",
                total=run.total_steps,
                completed=run.steps,
                count=f"{run.steps}/{run.total_steps}",
                info=f"compiled in {compile_seconds:.0f} s",
            )

    def rate(self, steps: int) -> float:
        """Training-only steps/s: the steps taken since :meth:`started`, over the time since."""
        assert self.train_start is not None, "Progress.started was not called"
        return (steps - self.start_steps) / max(self.clock() - self.train_start, 1e-9)

    def __call__(self, run: Any) -> None:
        if self.mode == "off":
            return
        now = self.clock()
        if self.mode == "plain" and not run.finished and now - self.last_line < self.interval:
            return  # reading the episode log and printing only when a line is due
        rate = self.rate(run.steps)
        recent = recent_return(run.history)
        shown = "n/a" if recent is None else f"{recent:.2f}"
        eta = (run.total_steps - run.steps) / rate if rate > 0 else float("inf")
        info = f"{rate:,.0f} steps/s  return {shown}  ETA {_duration(eta)}"
        if self.mode == "rich":
            self.bar.update(self.task, completed=run.steps, info=info, count=f"{run.steps}/{run.total_steps}")
        else:
            self._print(f"dispatchrl: {run.steps}/{run.total_steps} steps  {info}")
            self.last_line = now
        if run.finished:
            self.close()

    def _print(self, line: str) -> None:
        self.out.write(line + "\n")
        self.out.flush()

    def close(self) -> None:
        self._stop_heartbeat()
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


def _read_compile_times() -> dict[str, dict[str, float]]:
    try:
        times = json.loads((cache_dir() / COMPILE_TIMES).read_text())
        return times if isinstance(times, dict) else {}
    except Exception:  # missing, unreadable or not JSON: no estimate, never a failed run
        return {}


def _record_compile_time(key: str, kind: str, seconds: float) -> None:
    """Keep ``seconds`` as ``key``'s last ``kind`` ("cold"/"warm") compile time; written under a
    temporary name and renamed (processes may share the cache), and never fails a run."""
    try:
        times = _read_compile_times()
        entry = times.get(key)
        times[key] = {**(entry if isinstance(entry, dict) else {}), kind: round(seconds, 1)}
        atomic_write_text(cache_dir() / COMPILE_TIMES, json.dumps(times, indent=1, sort_keys=True))
    except Exception:
        pass


def _duration(seconds: float) -> str:
    if not np.isfinite(seconds):
        return "?"
    seconds = round(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
