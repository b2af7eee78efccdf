"""Callbacks: driver hooks (see :data:`.driver.Hook`) that an SB3 user expects, firing at chunk
boundaries. Pass them as ``train(..., hooks=[...])`` or ``model.learn(n, callback=[...])``."""

from __future__ import annotations

import copy
import functools
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np

from ..errors import ConfigError
from ..nn import Policy
from .driver import TrainingRun
from .evaluation import EVAL_SEEDS, SELECTION_SEEDS, evaluate, evaluate_lockstep

__all__ = ["EvalCallback", "StopOnReward"]


#: an evaluation's row (without its steps) and the score choosing by it (None: the return)
Evaluated = tuple[dict[str, Any], float | None]


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ConfigError(f"{name} must be a positive int, got {value!r}")
    return int(value)


class EvalCallback:
    """Every ``every`` env steps (all envs) and at the end, evaluate the deterministic policy for
    ``episodes`` episodes (reset seeds from the fixed evaluation seeds on) and append a row to
    :attr:`rows`: ``{"steps", "eval_return", "eval_return_std", "eval_returns"}``, and the first two
    into the run's logger when it has one (``selection_return`` and ``selection_return_std`` with
    ``deploy_best``). With
    ``best_path``, the run is checkpointed there whenever the mean return is the best so far.
    ``env`` evaluates (a gymnasium id, env or callable); default: the training env's twin.

    ``deploy_best=True``: the run's result deploys the best-evaluated policy instead of the final
    one (:attr:`best_policy`, a host copy; ``TrainResult.policy_steps`` says when it was taken),
    and the episodes' reset seeds come from :data:`~.evaluation.SELECTION_SEEDS`, so the 10
    evaluation episodes reported afterwards are held out from the choice. A native env with a
    :meth:`~dispatchrl.envs.NativeEnv.selection_score` (the multirotor's held-out success) is ranked by
    it instead of the return (rows and logger: ``selection_score``; the return episodes are then
    not run, unless a :class:`StopOnReward` reads this callback); :attr:`best_score` is the
    best value so far. A snapshot of the
    policy at 10k steps can sit in a short collapse (NOTES.md, "The first result"); SB3 users get
    the same from ``EvalCallback(best_model_save_path=...)``.

    An MLP's policy (a host snapshot of its weights) is evaluated on a thread of its own beside
    the next chunk's training, and recorded (rows, logger, best policy) at the next evaluation or
    when the run ends: the same rows, at the same steps, as evaluating in turn. The run's last
    evaluation, and every one with ``best_path`` (the run is saved at the best evaluation's step)
    or a :class:`StopOnReward` reading the rows, runs in turn."""

    def __init__(
        self,
        every: int,
        episodes: int = 5,
        best_path: str | Path | None = None,
        env: Any = None,
        deploy_best: bool = False,
    ) -> None:
        self.every = _positive_int("EvalCallback: 'every'", every)
        self.episodes = _positive_int("EvalCallback: 'episodes'", episodes)
        if not isinstance(deploy_best, bool):
            raise ConfigError(f"EvalCallback: 'deploy_best' must be True or False, got {deploy_best!r}")
        seeds = SELECTION_SEEDS if deploy_best else EVAL_SEEDS
        if deploy_best and self.episodes > len(seeds):
            raise ConfigError(f"EvalCallback: 'episodes' must be at most {len(seeds)} with deploy_best, got {episodes}")
        self.seeds = range(seeds[0], seeds[0] + self.episodes)
        self.best_path = None if best_path is None else Path(best_path)
        self.env = env
        self.deploy_best = deploy_best
        self.rows: list[dict[str, Any]] = []
        self.best_score = -np.inf
        self.best_steps: int | None = None
        self.best_policy: Callable[[np.ndarray], np.ndarray] | None = None
        self._envs: list[gymnasium.Env] | None = None  # deploy_best's evaluation envs, one per episode
        #: run the return episodes even where a selection score chooses (a StopOnReward reads them)
        self.returns_read = False
        #: the evaluation running in the background: (steps, policy, its future)
        self._pending: tuple[int, Callable[[np.ndarray], np.ndarray], Future[Evaluated]] | None = None

    def period(self, run: TrainingRun) -> int:
        """Iterations between evaluations (the driver ends a chunk at each multiple)."""
        return max(1, self.every // run.steps_per_iteration)

    def __call__(self, run: TrainingRun) -> None:
        if not (run.finished or run.done % self.period(run) == 0):
            return
        if self._last_steps() == run.steps:
            return  # already evaluated at this step (a run continued by a facade's learn())
        env = self.env
        if env is None:
            env = run.spec.eval_id if run.spec.eval_id is not None else run.spec.make_eval_env
        policy = run.spec.deployed_policy(run.algo, run.state)
        evaluation = functools.partial(self._evaluate, run.spec.native, env)
        self.finish(run)  # the previous evaluation's results first, in order
        # on a thread of its own while training goes on (the fused step holds no GIL), where no
        # result is needed before the next evaluation (a checkpoint of the best run is saved as
        # it stands, a StopOnReward reads the latest row, the last evaluation ends the run) and
        # the policy is a host snapshot (an MLP's Policy: another network's policy may read its
        # live weights, or device memory from this thread only)
        if isinstance(policy, Policy) and self.best_path is None and not (self.returns_read or run.finished):
            self._pending = (run.steps, policy, _in_background(evaluation, policy))
        else:
            self._record(run, run.steps, policy, evaluation(policy))

    def finish(self, run: TrainingRun) -> None:
        """Record the evaluation still running in the background, if any; the driver calls this
        after the run's last chunk (also when a hook stopped the run)."""
        if self._pending is not None:
            (steps, policy, future), self._pending = self._pending, None
            self._record(run, steps, policy, future.result())

    def _last_steps(self) -> int | None:
        return self._pending[0] if self._pending else self.rows[-1]["steps"] if self.rows else None

    def _evaluate(self, native: Any, env: Any, policy: Callable[[np.ndarray], np.ndarray]) -> Evaluated:
        # choosing ranks by the env's selection score where it has one (the multirotor's held-out
        # success), else by the return; a reported evaluation adds the task's own measures
        score = native.selection_score(policy) if native is not None and self.deploy_best else None
        if self.deploy_best:
            row: dict[str, Any] = {} if score is None else {"selection_score": score}
        else:
            row = native.task_metrics(policy) if native is not None else {}
        if score is None or self.returns_read:  # a score chooses: the returns would rank nothing
            if self.deploy_best and not isinstance(env, gymnasium.Env):  # choosing: episodes in lockstep
                if self._envs is None:  # made once, reused by every evaluation
                    self._envs = [gymnasium.make(env) if isinstance(env, str) else env() for _ in self.seeds]
                mean, returns = evaluate_lockstep(policy, self._envs, self.seeds)
            else:
                mean, returns = evaluate(policy, env, self.seeds)
            row = {"eval_return": mean, "eval_return_std": float(np.std(returns)), "eval_returns": returns, **row}
        return row, score

    def _record(
        self,
        run: TrainingRun,
        steps: int,
        policy: Callable[[np.ndarray], np.ndarray],
        evaluated: Evaluated,
    ) -> None:
        """Append the evaluation at ``steps`` to the rows and the logger, and keep its policy
        where it is the best so far."""
        row, score = evaluated
        self.rows.append({"steps": steps, **row})
        if run.logger is not None:  # beside the training rows (``dispatchrl plot --metric eval_return``)
            # a deploy_best evaluation is on other episodes than the reported one: another column
            key = "selection_return" if self.deploy_best else "eval_return"
            task = {k: v for k, v in row.items() if not k.startswith("eval_return")}
            returned = {key: row["eval_return"], f"{key}_std": row["eval_return_std"]} if "eval_return" in row else {}
            run.logger.write(steps, {**returned, **task})
        chosen_by = row["eval_return"] if score is None else score
        if chosen_by > self.best_score:
            self.best_score, self.best_steps = chosen_by, steps
            if self.deploy_best:
                self.best_policy = _host_copy(policy)
            if self.best_path is not None:  # evaluated in the foreground: the run is at ``steps``
                run.save(self.best_path)
        if self.deploy_best and self.best_policy is not None and self.best_steps is not None:
            run.deployed = (self.best_policy, self.best_steps)


def _in_background(function: Callable[..., Evaluated], *args: Any) -> Future[Evaluated]:
    """``function(*args)`` on a daemon thread of its own, its value or exception in the future: a
    run that raised leaves it behind, and nothing waits for it at exit."""
    future: Future[Evaluated] = Future()

    def run() -> None:
        try:
            future.set_result(function(*args))
        except BaseException as error:  # handed to whoever waits for the result
            future.set_exception(error)

    threading.Thread(target=run, name="dispatchrl-evaluation", daemon=True).start()
    return future


def _host_copy(policy: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """A copy of a deployed policy that later training cannot change: an MLP's
    :class:`~dispatchrl.nn.Policy` holds host copies already; another network's policy may read
    its live weights, so it is deep-copied (refused where it cannot be)."""
    if isinstance(policy, Policy):
        return policy
    try:
        return copy.deepcopy(policy)
    except Exception as e:  # a user network holding what cannot be copied (locks, device handles)
        raise ConfigError(
            f"EvalCallback(deploy_best=True): cannot keep a copy of the {type(policy).__name__} policy "
            f"({type(e).__name__}: {e}); use an MLP network or deploy_best=False"
        ) from None


class StopOnReward:
    """Stop the run cleanly (``run.stop``) once the reward reaches ``threshold``: the latest
    evaluation of ``eval_callback`` (list it before this one), or without one the mean return
    of the last 10 finished training episodes. :attr:`stopped_at` holds the steps then."""

    def __init__(self, threshold: float, eval_callback: EvalCallback | None = None) -> None:
        if not isinstance(threshold, (int, float)) or not np.isfinite(threshold):
            raise ConfigError(f"StopOnReward: 'threshold' must be a finite number, got {threshold!r}")
        self.threshold, self.eval_callback = float(threshold), eval_callback
        if eval_callback is not None:
            eval_callback.returns_read = True
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
