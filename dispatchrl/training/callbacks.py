"""Callbacks: driver hooks (see :data:`.driver.Hook`) that an SB3 user expects, firing at chunk
boundaries. Pass them as ``train(..., hooks=[...])`` or ``model.learn(n, callback=[...])``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError
from .driver import TrainingRun
from .evaluation import EVAL_SEEDS, evaluate

__all__ = ["EvalCallback", "StopOnReward"]


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ConfigError(f"{name} must be a positive int, got {value!r}")
    return int(value)


class EvalCallback:
    """Every ``every`` env steps (all envs) and at the end, evaluate the deterministic policy for
    ``episodes`` episodes (reset seeds from the fixed evaluation seeds on) and append a row to
    :attr:`rows`: ``{"steps", "eval_return", "eval_return_std", "eval_returns"}``, and the first two
    into the run's logger when it has one. With
    ``best_path``, the run is checkpointed there whenever the mean return is the best so far.
    ``env`` evaluates (a gymnasium id, env or callable); default: the training env's twin."""

    def __init__(self, every: int, episodes: int = 5, best_path: str | Path | None = None, env: Any = None) -> None:
        self.every = _positive_int("EvalCallback: 'every'", every)
        self.episodes = _positive_int("EvalCallback: 'episodes'", episodes)
        self.best_path = None if best_path is None else Path(best_path)
        self.env = env
        self.rows: list[dict[str, Any]] = []
        self.best_return = -np.inf
        self.best_steps: int | None = None

    def period(self, run: TrainingRun) -> int:
        """Iterations between evaluations (the driver ends a chunk at each multiple)."""
        return max(1, self.every // run.steps_per_iteration)

    def __call__(self, run: TrainingRun) -> None:
        if not (run.finished or run.done % self.period(run) == 0):
            return
        if self.rows and self.rows[-1]["steps"] == run.steps:
            return  # already evaluated at this step (a run continued by a facade's learn())
        env = self.env
        if env is None:
            env = run.spec.eval_id if run.spec.eval_id is not None else run.spec.make_eval_env
        policy = run.spec.deployed_policy(run.algo, run.state)
        seeds = range(EVAL_SEEDS[0], EVAL_SEEDS[0] + self.episodes)
        mean, returns = evaluate(policy, env, seeds)
        self.rows.append(
            {
                "steps": run.steps,
                "eval_return": mean,
                "eval_return_std": float(np.std(returns)),
                "eval_returns": returns,
            }
        )
        if run.logger is not None:  # beside the training rows (``dispatchrl plot --metric eval_return``)
            run.logger.write(run.steps, {"eval_return": mean, "eval_return_std": float(np.std(returns))})
        if mean > self.best_return:
            self.best_return, self.best_steps = mean, run.steps
            if self.best_path is not None:
                run.save(self.best_path)


class StopOnReward:
    """Stop the run cleanly (``run.stop``) once the reward reaches ``threshold``: the latest
    evaluation of ``eval_callback`` (list it before this one), or without one the mean return
    of the last 10 finished training episodes. :attr:`stopped_at` holds the steps then."""

    def __init__(self, threshold: float, eval_callback: EvalCallback | None = None) -> None:
        if not isinstance(threshold, (int, float)) or not np.isfinite(threshold):
            raise ConfigError(f"StopOnReward: 'threshold' must be a finite number, got {threshold!r}")
        self.threshold, self.eval_callback = float(threshold), eval_callback
        self.stopped_at: int | None = None

    def __call__(self, run: TrainingRun) -> None:
        if self.eval_callback is not None:
            rows = self.eval_callback.rows
            value = rows[-1]["eval_return"] if rows else None
        else:
            returns = run.history.recent_returns(10)
            value = float(np.mean(returns)) if len(returns) else None
        if value is not None and value >= self.threshold:
            run.stop = True
            self.stopped_at = run.steps
            what = "the latest evaluation return" if self.eval_callback is not None else "the recent training return"
            print(  # the progress display's last line shows the steps, not why the run ended there
                f"dispatchrl: StopOnReward: {what} {value:.1f} reached the threshold {self.threshold:g}: "
                f"stopping at step {run.steps} of {run.total_steps}",
                file=sys.stderr,
                flush=True,
            )
