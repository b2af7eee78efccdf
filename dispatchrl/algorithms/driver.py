"""The one training driver of TD3, SAC and PPO.

It checks the seed and the config, resolves the env, builds (or resumes) the state, fuses the
algorithm's steps, then runs *iterations* (see :mod:`.protocol`) in chunks: each chunk is one call
into compiled code for native envs, or a Python loop over a gymnasium batch, and between chunks
the driver calls its hooks with the live :class:`TrainingRun`. The progress bar is one hook;
periodic checkpoints, divergence checks, metrics logging and callbacks are meant to be others.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from ..arrays import assign, to_numpy
from ..devices import Device
from ..errors import ConfigError
from ..staging import Step, fuse
from .envspec import EnvSpec, resolve_env
from .runs import TrainResult, build_state, restore_for_resume, save_run
from .protocol import Algorithm, Schedule


__all__ = ["EPISODE_LOG_CAPACITY", "Hook", "Progress", "TrainingRun", "check_config", "check_seed",
           "chunk_iterations", "train"]

EPISODE_LOG_CAPACITY = 1 << 16
#: Python-stepped envs return to the hooks about every this many steps per env
PYTHON_CHUNK_STEPS = 200


@dataclass
class TrainingRun:
    """A run in progress: what hooks see at chunk boundaries. ``done`` counts iterations; all
    of ``state`` is consistent (a checkpoint taken now resumes bit for bit)."""

    algo: Algorithm
    device: Device
    spec: EnvSpec
    config: Any
    seed: int
    state: Any
    schedule: Schedule
    iterations: int          # the run's total
    done: int                # iterations finished so far (a resumed run starts above 0)

    @property
    def steps_per_iteration(self) -> int:
        return self.config.num_envs * self.schedule.env_steps

    @property
    def steps(self) -> int:
        """Environment steps taken so far, over all envs."""
        return self.done * self.steps_per_iteration

    @property
    def total_steps(self) -> int:
        return self.iterations * self.steps_per_iteration

    @property
    def finished(self) -> bool:
        return self.done >= self.iterations

    def save(self, path: str | Path) -> tuple[Path, Path]:
        """Checkpoint the run as it stands; ``train(..., resume=path)`` continues it bit for bit."""
        return save_run(path, self.algo.NAME, self.spec, self.config, self.seed, self.steps, self.state)


#: called with the run after every chunk (the last call has ``run.finished``); raising stops the run
Hook = Callable[[TrainingRun], None]


class Progress:
    """A one-line progress bar on a terminal (steps, steps/s, recent return); silent when piped.
    As a hook it updates after each chunk and ends its line when the run is finished."""

    def __init__(self, total: int, enabled: bool | None = None, stream: IO[str] = sys.stderr) -> None:
        self.total, self.stream = total, stream
        self.enabled = stream.isatty() if enabled is None else enabled
        self.start = time.perf_counter()

    def __call__(self, run: TrainingRun) -> None:
        self.update(run.steps, run.state)
        if run.finished:
            self.close()

    def update(self, done: int, state: Any) -> None:
        if not self.enabled:  # reading the episode log copies it: only for a visible bar
            return
        recent_return = _recent_return(state)
        rate = done / max(time.perf_counter() - self.start, 1e-9)
        width = 30
        filled = int(width * done / max(self.total, 1))
        shown = "n/a" if recent_return is None else f"{recent_return:9.2f}"
        self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{self.total} steps "
                          f"{rate:10.0f} steps/s  return {shown}")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


def _recent_return(state: Any) -> float | None:
    _, returns, _ = state.episodes.finished()
    return float(np.mean(returns[-10:])) if len(returns) else None


def check_seed(seed: object) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**31:
        raise ConfigError(f"seed must be an int in [0, 2**31), got {seed!r}")
    return int(seed)


def check_config(algo: Algorithm, config: Any) -> None:
    """``config`` must be ``algo``'s own Config (a SAC config given to TD3 is refused), and valid."""
    expected: Any = algo.Config
    if not isinstance(config, expected):
        module = expected.__module__
        raise ConfigError(f"config must be a {module}.Config, got {type(config).__module__}."
                          f"{type(config).__name__}")
    config.validate()


def chunk_iterations(spec: EnvSpec, schedule: Schedule, iterations: int) -> int:
    """Iterations per chunk: about 20 chunks a run (at most 2000 env steps per env each) for
    native envs, where a chunk is one call into compiled code; about PYTHON_CHUNK_STEPS env
    steps per env for Python-stepped ones."""
    if spec.native is None:
        return max(1, PYTHON_CHUNK_STEPS // schedule.env_steps)
    return max(1, min(iterations // 20, 2000 // schedule.env_steps))


def train(algo: Algorithm, device: Device, env: object, config: Any = None, seed: object = 0,
          progress: bool | None = None, resume: str | Path | None = None,
          hooks: Sequence[Hook] = ()) -> TrainResult:
    """Train ``algo`` on ``env`` from ``seed`` (or continue checkpoint ``resume``), calling
    ``hooks`` after every chunk; ``config`` defaults to ``algo.config_for(env)``."""
    config = algo.config_for(env) if config is None else config
    check_config(algo, config)
    seed = check_seed(seed)
    spec = resolve_env(env, config.num_envs)
    start = time.perf_counter()
    state = build_state(algo, device, spec, config, seed)
    if resume is not None:
        seed = restore_for_resume(resume, algo.NAME, spec, config, state)
    schedule = algo.schedule(config)
    iterations = config.total_steps // (config.num_envs * schedule.env_steps)
    run = TrainingRun(algo, device, spec, config, seed, state, schedule, iterations,
                      done=int(to_numpy(state.step)[0]) // schedule.env_steps)
    if run.done > iterations:
        raise ConfigError(f"the checkpoint is at {run.steps} steps, past total_steps={config.total_steps}")
    all_hooks: list[Hook] = [Progress(run.total_steps, progress), *hooks]
    loop = _NativeLoop(run) if spec.native is not None else _PythonLoop(run)
    try:
        compile_seconds = time.perf_counter() - start
        loop_start = time.perf_counter()
        chunk = chunk_iterations(spec, schedule, iterations)
        while run.done < iterations:
            count = min(chunk, iterations - run.done)
            loop.run(count)
            run.done += count
            for hook in all_hooks:
                hook(run)
        train_seconds = time.perf_counter() - loop_start
    finally:
        loop.close()
    ends, returns, lengths = state.episodes.finished()
    return TrainResult(algo.NAME, spec.name, device, seed, run.total_steps, config,
                       algo.policy(state, spec.action_low, spec.action_high),
                       {"steps": ends * config.num_envs, "returns": returns, "lengths": lengths},
                       train_seconds, compile_seconds, state, spec)


class _NativeLoop:
    """Native envs: the env step (env included) and the update are each one compiled step."""

    def __init__(self, run: TrainingRun) -> None:
        self.state, self.schedule, self.algo = run.state, run.schedule, run.algo
        self.env_step = fuse(run.device, run.algo.native_step, run.config, run.spec.native, run.state)
        self.update = fuse(run.device, run.algo.update, run.config, run.state) if run.schedule.updates else None

    def run(self, iterations: int) -> None:
        if self.update is None:  # nothing between iterations: the whole chunk in one call
            self.env_step(iterations * self.schedule.env_steps)
            self.algo.check_iteration(self.state)
            return
        for _ in range(iterations):
            self.env_step(self.schedule.env_steps)
            self.algo.check_iteration(self.state)
            self.update(self.schedule.updates)

    def close(self) -> None:
        pass


class _PythonLoop:
    """Python-stepped envs: per env step, a fused ``act``, the env's numpy step, a fused ``store``
    of the transition; then the iteration's fused updates."""

    def __init__(self, run: TrainingRun) -> None:
        assert run.spec.make_batch is not None
        self.state, self.schedule, self.algo, self.seed = run.state, run.schedule, run.algo, run.seed
        self.low, self.high = run.spec.action_low, run.spec.action_high
        self.obs: np.ndarray | None = None
        self.batch = run.spec.make_batch()
        try:
            self.act: Step = fuse(run.device, run.algo.act, run.config, run.state, run.state.transition.obs)
            self.store: Step = fuse(run.device, run.algo.store, run.config, run.state)
            self.update = fuse(run.device, run.algo.update, run.config, run.state) if run.schedule.updates else None
        except BaseException:
            self.batch.close()
            raise

    def run(self, iterations: int) -> None:
        state, batch = self.state, self.batch
        transition = state.transition
        if self.obs is None:
            self.obs = _finite_rows("reset observations", batch.reset(self.seed))
        for _ in range(iterations):
            for _ in range(self.schedule.env_steps):
                assign(transition.obs, self.obs)
                self.act()
                action = np.clip(to_numpy(state.action), -1.0, 1.0)
                physical = self.low + (action + 1) * 0.5 * (self.high - self.low)
                obs, reward, terminated, truncated, _ = batch.step(physical)
                self.obs = _finite_rows("observations", obs)
                for array, value in ((transition.next_obs, _finite_rows("final observations", batch.final_obs)),
                                     (transition.reward, _finite_rows("rewards", reward)),
                                     (transition.terminated, terminated), (transition.truncated, truncated)):
                    assign(array, value)
                self.store()
            self.algo.check_iteration(state)
            if self.update is not None:
                self.update(self.schedule.updates)

    def close(self) -> None:
        self.batch.close()


def _finite_rows(name: str, values: Any) -> np.ndarray:
    values = np.asarray(values)
    if not np.all(np.isfinite(values)):
        row = int(np.argwhere(~np.isfinite(values.reshape(values.shape[0], -1)))[0][0])
        raise ConfigError(f"{name}: the env returned NaN or inf (env row {row}); observation "
                          "normalization and the policy need finite values")
    return values
