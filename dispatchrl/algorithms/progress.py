"""The training progress display: a rich spinner while the fused steps compile, then a bar with
steps, training-only steps/s, the recent return and the ETA (terminals and notebooks); a plain
line every ``interval`` seconds when the output is neither (pipes, job schedulers, CI logs)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import IO, Any

import numpy as np

__all__ = ["Progress", "recent_return"]


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

    def compiling(self, what: str) -> None:
        """Say what is being built (a spinner, or one plain line)."""
        self.mode = self._choose_mode()
        if self.mode == "rich":
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, SpinnerColumn, TextColumn
            from rich.progress import Progress as RichProgress

            self.bar = RichProgress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[info]}"),
                console=Console(file=self.out),
                refresh_per_second=4,  # the refresh thread shares the cores with training
                transient=False,
            )
            self.bar.start()
            self.task = self.bar.add_task(f"{what}…", total=None, info="")
        elif self.mode == "plain":
            self._print(f"dispatchrl: {what}…")

    def started(self, run: Any) -> None:
        """The fused steps are built: training (and the rate's clock) starts now."""
        self.train_start, self.start_steps = self.clock(), run.steps
        if self.mode == "rich":
            self.bar.update(
                self.task,
                description=f"{run.algo.NAME.upper()} {run.spec.name}",
                total=run.total_steps,
                completed=run.steps,
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
            self.bar.update(self.task, completed=run.steps, info=info)
        else:
            self._print(f"dispatchrl: {run.steps}/{run.total_steps} steps  {info}")
            self.last_line = now
        if run.finished:
            self.close()

    def _print(self, line: str) -> None:
        self.out.write(line + "\n")
        self.out.flush()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


def _duration(seconds: float) -> str:
    if not np.isfinite(seconds):
        return "?"
    seconds = round(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
