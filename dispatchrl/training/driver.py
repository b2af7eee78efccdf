"""The one training driver of TD3, SAC and PPO.

It checks the seed and the config, resolves the env, builds (or resumes) the state, fuses the
algorithm's steps, then runs *iterations* (see :mod:`.protocol`) in chunks: each chunk is one call
into compiled code for native envs, or a Python loop over a gymnasium batch, and between chunks
the driver calls its hooks with the live :class:`TrainingRun`. The progress bar is one hook;
periodic checkpoints, divergence checks, metrics logging and callbacks are meant to be others.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import checkpoint
from ..algorithms.memory import check_fits, estimate, transition_bytes
from ..algorithms.protocol import Algorithm, Schedule
from ..arrays import Array, assign, to_numpy, zeros
from ..devices import Device
from ..errors import DIVERGENCE_HINT, CheckpointWriteError, ConfigError, TrainingDiverged
from ..kernels.core.api import nonfinite_flag
from ..loggers import Logger, MetricsHook
from ..staging import Every, fuse_steps, when
from .chunks import CHUNK_STEPS, PYTHON_CHUNK_STEPS, chunk_iterations, episode_ring_capacity
from .envspec import EnvSpec, check_action_space, critic_observation_dim, resolve_env
from .progress import Progress
from .runs import EpisodeHistory, Snapshot, TrainResult, build_state, restore_for_resume, save_run

__all__ = [
    "CHUNK_STEPS",
    "DIVERGENCE_HINT",
    "PYTHON_CHUNK_STEPS",
    "DiskSpaceCheck",
    "DivergenceCheck",
    "Hook",
    "LongCompileWarning",
    "PeriodicCheckpoint",
    "Progress",
    "RoundedStepsWarning",
    "StopOnRequest",
    "StopRequested",
    "TrainingRun",
    "available_memory",
    "check_config",
    "check_disk_space",
    "check_memory",
    "check_seed",
    "chunk_iterations",
    "episode_ring_capacity",
    "train",
    "warn_long_compile",
    "watched_quantities",
]


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
    iterations: int  # the run's total
    done: int  # iterations finished so far (a resumed run starts above 0)
    start_steps: int = 0  # steps when this train call's loop started (above 0 when resumed)
    train_start: float = 0.0  # time.perf_counter() once the fused steps were built
    #: set by a hook to end the run after this chunk's hooks (the result then holds ``steps``)
    stop: bool = False
    compile_seconds: float = 0.0  # building the state, tracing and compiling the steps (set before the loop)
    logger: Logger | None = None  # the run's metrics backends: hooks may write rows (EvalCallback does)
    #: finished training episodes (a resumed run's earlier ones included), read before the hooks
    history: EpisodeHistory = dataclasses.field(default_factory=EpisodeHistory)
    #: (host policy, the steps it was taken at): set by a hook to deploy another policy than the
    #: final one (EvalCallback's ``deploy_best``); the result's ``policy`` then
    deployed: tuple[Callable[[np.ndarray], np.ndarray], int] | None = None

    def steps_per_second(self) -> float:
        """Training-only rate of this train call: compilation (before train_start) excluded."""
        return (self.steps - self.start_steps) / max(time.perf_counter() - self.train_start, 1e-9)

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

    def save(self, path: str | Path, keep: int | None = None) -> tuple[Path, Path]:
        """Checkpoint the run as it stands; ``train(..., resume=path)`` continues it bit for bit.
        ``keep=K``: into directory ``path`` as ``step-<steps>.npz``, keeping the newest K.
        A state holding NaN or inf is refused (:class:`TrainingDiverged`, see
        :func:`~.runs.save_run`): the previous checkpoints stay as they are (rotation removes old
        ones only after a new one is written)."""
        return save_run(
            path, self.algo.NAME, self.spec, self.config, self.seed, self.steps, self.state, keep, self.history.arrays()
        )


#: called with the run after every chunk (the last call has ``run.finished``); raising stops the
#: run, setting ``run.stop`` ends it cleanly. A hook with a method ``period(run) -> iterations``
#: gets a chunk boundary at every multiple of its period (as :class:`PeriodicCheckpoint`; 0: none);
#: one with ``check_before_training(run)`` has it called once, after the state is built and before
#: anything compiles, to refuse a run early (as :class:`DiskSpaceCheck`); one with ``finish(run)``
#: has it called once after the last chunk's hooks, to finish what it runs in the background (as
#: :class:`~.callbacks.EvalCallback`, whose evaluations overlap the next chunk's training).
Hook = Callable[[TrainingRun], None]


def checkpoint_bytes(run: TrainingRun) -> int:
    """About the size of one checkpoint of ``run`` (uncompressed npz: its arrays' bytes, the
    history's, and some room for headers and metadata)."""
    arrays = sum(array.size * array.dtype.itemsize for _, array in checkpoint.named_arrays(run.state))
    return int(arrays * 1.01) + 24 * len(run.history) + 2**20


def check_disk_space(run: TrainingRun, path: str | Path, keep: int | None = None) -> None:
    """Refuse (:class:`ConfigError`), before training, a checkpoint path whose disk cannot hold
    the run's checkpoints: one more for a single checkpoint (it is written beside the old one,
    then renamed over it); with ``keep=K`` rotation, up to K+1 at once (K kept, one being
    written), less those already there."""
    size = checkpoint_bytes(run)
    if keep is None:
        copies, why = 1, "one checkpoint"
    else:
        present = len([p for p in Path(path).glob("step-*.npz")]) if Path(path).is_dir() else 0
        copies = max(1, keep + 1 - present)
        why = f"--keep {keep} plus the one being written" + (f", {present} there already" if present else "")
    free = free_disk(path)
    if free is not None and free < copies * size:
        raise ConfigError(
            f"checkpoint path {os.fspath(path)}: its checkpoints need {copies * size / 2**20:.1f} MiB free ({copies} × "
            f"{size / 2**20:.1f} MiB: {why}), only {free / 2**20:.1f} MiB are free on its disk; free space"
            + (", lower --keep," if keep is not None and keep > 1 else "")
            + " or choose another path"
        )


class DiskSpaceCheck:
    """Hook: before training (after the state is built, before anything compiles) refuse a
    checkpoint path without room for the run's checkpoints (:func:`check_disk_space`)."""

    def __init__(self, path: str | Path, keep: int | None = None) -> None:
        self.path, self.keep = Path(path), keep

    def check_before_training(self, run: TrainingRun) -> None:
        check_disk_space(run, self.path, self.keep)

    def __call__(self, run: TrainingRun) -> None:
        pass


class PeriodicCheckpoint:
    """Hook: checkpoint every ``every`` env steps (all envs) and at the end, into directory
    ``path`` keeping the newest ``keep`` (each one file, written atomically: a crash at any
    moment leaves the previous ones whole). The driver ends a chunk at every multiple of
    ``every`` (see :attr:`every`), so saves land exactly there. Before training it refuses a
    disk without room for them (:func:`check_disk_space`).

    A save that fails (a full disk) raises :class:`~dispatchrl.errors.CheckpointWriteError`;
    with ``stop_on_error`` it ends the run at that boundary instead (``train`` then returns
    the result so far) and keeps the error in :attr:`error`, for the caller to report."""

    def __init__(self, path: str | Path, every: int, keep: int = 3, stop_on_error: bool = False) -> None:
        for name, value in (("every", every), ("keep", keep)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ConfigError(f"PeriodicCheckpoint: '{name}' must be a positive int, got {value!r}")
        self.path, self.every, self.keep = Path(path), int(every), int(keep)
        self.stop_on_error = stop_on_error
        self.error: CheckpointWriteError | None = None

    def check_before_training(self, run: TrainingRun) -> None:
        check_disk_space(run, self.path, self.keep)

    def __call__(self, run: TrainingRun) -> None:
        if run.finished or run.done % self.period(run) == 0:
            try:
                self.save(run)
            except CheckpointWriteError as error:
                if not self.stop_on_error:
                    raise
                self.error, run.stop = error, True

    def period(self, run: TrainingRun) -> int:
        """Iterations between saves (at least one)."""
        return max(1, self.every // run.steps_per_iteration)

    def save(self, run: TrainingRun) -> Path:
        return run.save(self.path, keep=self.keep)[0]


class StopRequested(Exception):
    """Raised by :class:`StopOnRequest` at the chunk boundary after a stop was requested (Ctrl-C):
    ``steps`` were trained and, if a checkpoint path was given, ``saved`` holds them."""

    def __init__(self, steps: int, saved: Path | None) -> None:
        where = f"; saved {saved}" if saved is not None else "; nothing saved (no --save path)"
        super().__init__(f"stopped at step {steps}{where}")
        self.steps, self.saved = steps, saved


class StopOnRequest:
    """Hook: once :meth:`request` was called (from a signal handler: it only sets a flag), the
    next chunk boundary checkpoints the run with ``checkpoint`` (if given) and raises
    :class:`StopRequested`."""

    def __init__(
        self, checkpoint: PeriodicCheckpoint | None = None, save: Callable[[TrainingRun], Path] | None = None
    ) -> None:
        self.requested = False
        self.save = save if save is not None else (checkpoint.save if checkpoint is not None else None)

    def request(self, *_: Any) -> None:
        self.requested = True

    def __call__(self, run: TrainingRun) -> None:
        if self.requested:
            raise StopRequested(run.steps, self.save(run) if self.save is not None else None)


def check_memory(algo: Algorithm, spec: EnvSpec, config: Any) -> None:
    """Refuse, before anything is allocated, a run whose state (networks with their gradients
    and Adam moments, batch and acting buffers, scratch, replay buffer or rollout: see
    :func:`.memory.estimate`) needs more memory than the machine has available; a memmapped
    replay ring is checked against its disk instead."""
    episodes = episode_ring_capacity(config.num_envs, algo.schedule(config).env_steps)
    critic_dim = critic_observation_dim(spec, config)
    allocations = estimate(algo, config, spec.obs_dim, spec.action_outputs, episodes, critic_dim)
    who = f"{type(config).__module__.rsplit('.', 1)[-1]} Config"
    folder = getattr(config, "memmap_path", None)
    if folder is not None:  # a memmapped ring needs disk, not memory
        capacity, row = config.capacity, spec.obs_dim + (critic_dim or 0)
        needed, available = transition_bytes(capacity, row, spec.action_dim), free_disk(folder)
        if available is not None and needed > available:
            raise ConfigError(
                f"{who}: the replay buffer of {capacity} rows needs {needed / 2**30:.1f} GiB, more than the "
                f"{available / 2**30:.1f} GiB free on the disk of memmap_path {os.fspath(folder)!r}; "
                "lower replay_capacity (default: total_steps)"
            )
    check_fits(allocations, available_memory(), who)


class LongCompileWarning(UserWarning):
    """The config's networks are deep enough that compiling the fused steps takes minutes."""


class RoundedStepsWarning(UserWarning):
    """``total_steps`` is not a whole number of training iterations: the run stops at the last whole one."""


#: a run shorter than total_steps by more than this fraction warns (the defaults' PPO rollouts and
#: DQN phases round 3M and 50k down by 0.06-0.16 %: no warning for them)
ROUNDED_STEPS_TOLERANCE = 0.01


def warn_rounded_steps(config: Any, schedule: Any) -> None:
    """One warning, before compiling, when the run will take noticeably fewer steps than ``total_steps``."""
    per_iteration = config.num_envs * schedule.env_steps
    if config.total_steps % per_iteration > ROUNDED_STEPS_TOLERANCE * config.total_steps:
        warnings.warn(
            f"total_steps={config.total_steps} is not a multiple of one iteration's {per_iteration} env "
            f"steps (num_envs {config.num_envs} × {schedule.env_steps}): the run takes "
            f"{config.total_steps // per_iteration * per_iteration} steps",
            RoundedStepsWarning,
            stacklevel=3,
        )


#: more hidden layers than this warn of a long first compile: the fused step's code grows with
#: the layers (each adds forward, backward and Adam calls per network); 50 took 606 s on 2 cores
LONG_COMPILE_LAYERS = 8
COMPILE_SECONDS_PER_LAYER = 12


def warn_long_compile(config: Any) -> None:
    """One warning, before compiling, when ``config``'s networks will compile for minutes."""
    layers = len(getattr(config, "hidden", ()) or ())
    if layers > LONG_COMPILE_LAYERS:
        minutes = max(1, round(layers * COMPILE_SECONDS_PER_LAYER / 60))
        warnings.warn(
            f"{layers} hidden layers: compiling the fused steps may take about {minutes} min "
            f"(~{COMPILE_SECONDS_PER_LAYER} s per layer on a cold cache; later runs load it from the disk cache)",
            LongCompileWarning,
            stacklevel=3,
        )


def free_disk(path: Any) -> int | None:
    """Bytes free on the file system that holds ``path`` (or its nearest existing parent)."""
    path = os.path.abspath(os.fspath(path))
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation (MemAvailable), or None if unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


# ---------------------------------------------------------------- divergence detection


def watched_quantities(algo: Algorithm, state: Any) -> list[tuple[str, Array]]:
    """What the divergence check reads, most likely cause first (the first one found non-finite
    is the one reported): the algorithm's own (``algo.watched``: its losses' targets, then its
    networks' parameters), then the observation and reward. A non-finite loss reaches the
    weights through Adam within a step, and non-finite weights give non-finite actions, then
    observations; an observation alone non-finite means the env itself blew up."""
    env_now = getattr(state, "env_state", None)
    source = env_now if env_now is not None else state.transition
    return [*algo.watched(state), ("observation", source.obs), ("reward", source.reward)]


def _check_finite(device: Device, quantities: list[tuple[str, Array]], flag: Array) -> None:
    for code, (_, array) in enumerate(quantities, 1):
        nonfinite_flag(device, array, flag, code)


def _checked(
    step: Callable[..., None], counter: str, period: int, quantities: list[tuple[str, Array]], flag: Array
) -> Callable[..., None]:
    """``step``, then the divergence check every ``period`` counts of ``state.<counter>`` (after the
    step advanced it); the check only reads, so the step's numbers do not change."""

    def checked_step(device: Device, *args: Any) -> None:
        step(device, *args)
        state = args[-1]
        when(device, Every(getattr(state, counter), period), lambda device: _check_finite(device, quantities, flag))

    return checked_step


class DivergenceCheck:
    """The hook reading the divergence flag at chunk boundaries (before any other hook, so a
    diverged state is never checkpointed): raises :class:`TrainingDiverged` naming the first
    quantity found non-finite and the steps between the last clean boundary and this one. The
    run's end also checks the final weights on the host (the in-step check runs every K steps)."""

    def __init__(self, flag: Array, quantities: list[tuple[str, Array]], every: int) -> None:
        self.flag, self.quantities, self.every = flag, quantities, every
        self.clean_until: int | None = None  # env steps (all envs) of the last check that passed

    def __call__(self, run: TrainingRun) -> None:
        n = run.config.num_envs
        per_env = run.steps // n
        if self.clean_until is None:  # a run resumed from a checkpoint was clean when saved
            self.clean_until = run.steps if run.steps == 0 else (per_env - per_env % self.every) * n
        code = int(to_numpy(self.flag)[0])
        if code == 0 and run.finished:  # the steps after the last in-step check: the final weights
            code = next((i for i, (_, a) in enumerate(self.quantities, 1) if not np.all(np.isfinite(to_numpy(a)))), 0)
        if code:
            name, first = self.quantities[code - 1][0], self.clean_until
            # env steps are checked at multiples of K: the flag was raised by the first after
            # the last clean one (separate updates, PPO's, count their own K: no tighter bound)
            last = run.steps if run.schedule.updates else min(first + self.every * n, run.steps)
            raise TrainingDiverged(
                f"training diverged: {name} became NaN or inf between step {first} and {last}; training "
                f"stopped at step {run.steps} and saved nothing after step {first}. Hint: {DIVERGENCE_HINT}",
                name,
                first,
                last,
            )
        self.clean_until = (per_env - per_env % self.every) * n


def check_seed(seed: object) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**31:
        raise ConfigError(f"seed must be an int in [0, 2**31), got {seed!r}")
    return int(seed)


def check_config(algo: Algorithm, config: Any) -> None:
    """``config`` must be ``algo``'s own Config (a SAC config given to TD3 is refused), and valid."""
    expected: Any = algo.Config
    if not isinstance(config, expected):
        module = expected.__module__
        raise ConfigError(f"config must be a {module}.Config, got {type(config).__module__}.{type(config).__name__}")
    config.validate()


def train(
    algo: Algorithm,
    device: Device,
    env: object,
    config: Any = None,
    seed: object = 0,
    progress: bool | Progress | None = None,
    resume: str | Path | Snapshot | None = None,
    hooks: Sequence[Hook] = (),
    logger: Logger | None = None,
) -> TrainResult:
    """Train ``algo`` on ``env`` from ``seed`` (or continue checkpoint ``resume``, a path or an
    in-memory :class:`~.runs.Snapshot`), calling
    ``hooks`` after every chunk; ``config`` defaults to ``algo.config_for(env)``. ``progress``:
    see :class:`Progress` (or one, configured); ``logger``: metrics backends
    (:mod:`dispatchrl.loggers`), written at chunk boundaries."""
    config = algo.config_for(env) if config is None else config
    check_config(algo, config)
    seed = check_seed(seed)
    spec = resolve_env(env, config.num_envs)
    check_action_space(algo, spec)
    check_memory(algo, spec, config)
    warn_long_compile(config)
    schedule = algo.schedule(config)
    warn_rounded_steps(config, schedule)
    bar = progress if isinstance(progress, Progress) else Progress(progress)
    start = time.perf_counter()
    device_name = type(device).__name__.lower()
    bar.compiling(
        f"compiling fused {algo.NAME.upper()} step ({device_name})", key=f"{algo.NAME}/{spec.name}/{device_name}"
    )
    try:  # the bar is live (a rich display thread) from here
        state = build_state(algo, device, spec, config, seed)
        saved_history = None
        if resume is not None:
            seed, saved_history = restore_for_resume(resume, algo.NAME, spec, config, state)
        iterations = config.total_steps // (config.num_envs * schedule.env_steps)
        run = TrainingRun(
            algo,
            device,
            spec,
            config,
            seed,
            state,
            schedule,
            iterations,
            done=int(to_numpy(state.step)[0]) // schedule.env_steps,
            history=EpisodeHistory(saved_history, read=int(to_numpy(state.episodes.count)[0])),
        )
        if run.done > iterations:
            raise ConfigError(f"the checkpoint is at {run.steps} steps, past total_steps={config.total_steps}")
        check_every = getattr(config, "check_every", 0)
        divergence = None
        if check_every:
            divergence = DivergenceCheck(zeros(device, 1, np.int64), watched_quantities(algo, state), check_every)
        run.logger = logger
        for hook in hooks:  # e.g. room for the checkpoints: refused before anything compiles
            check_before_training = getattr(hook, "check_before_training", None)
            if callable(check_before_training):
                check_before_training(run)
        metrics = MetricsHook(logger) if logger is not None else None
        # metrics last: the rows other hooks write at the run's end (evaluations) are flushed with its own
        all_hooks: list[Hook] = [*([divergence] if divergence else []), bar, *hooks, *([metrics] if metrics else [])]
        loop = _NativeLoop(run, divergence) if spec.native is not None else _PythonLoop(run, divergence)
    except BaseException:
        bar.close()
        raise
    try:
        compile_seconds = run.compile_seconds = time.perf_counter() - start
        loop_start = run.train_start = time.perf_counter()
        run.start_steps = run.steps
        bar.started(run)
        if metrics is not None:
            metrics.begin(run)
        # a chunk never finishes more episodes than the device's ring holds (at most one per env step)
        ring_iterations = state.episodes.returns.shape[0] // run.steps_per_iteration
        if ring_iterations < 1:
            raise ConfigError(
                f"the episode log's ring holds {state.episodes.returns.shape[0]} episodes, fewer than "
                f"one iteration may finish ({run.steps_per_iteration}); size it with episode_ring_capacity"
            )
        chunk = min(chunk_iterations(spec, schedule, iterations), ring_iterations)
        period_of = (getattr(h, "period", None) for h in [*hooks, *([metrics] if metrics else [])])
        periods = [p for p in (period(run) for period in period_of if callable(period)) if p > 0]
        while run.done < iterations:
            # a chunk ends at each multiple of a hook's period (a periodic checkpoint saves there)
            count = min(chunk, iterations - run.done, *(p - run.done % p for p in periods))
            loop.run(count)
            run.done += count
            run.history.read(state.episodes, config.num_envs)  # before the ring wraps
            for hook in all_hooks:
                hook(run)
            if run.stop and not run.finished:  # a hook ended the run: it holds the steps so far
                run.iterations = iterations = run.done
                bar.close()
        for hook in all_hooks:  # what a hook still runs in the background (EvalCallback's evaluation)
            finish = getattr(hook, "finish", None)
            if callable(finish):
                finish(run)
        train_seconds = time.perf_counter() - loop_start
    finally:
        bar.close()
        loop.close()
        if logger is not None:  # a run stopped by a hook (or an error) keeps the rows it wrote
            logger.flush()
    policy, policy_steps = run.deployed or (spec.deployed_policy(algo, state), run.total_steps)
    return TrainResult(
        algo=algo.NAME,
        env=spec.name,
        device=device,
        seed=seed,
        steps=run.total_steps,
        config=config,
        policy=policy,
        policy_steps=policy_steps,
        history=run.history.arrays(),
        train_seconds=train_seconds,
        compile_seconds=compile_seconds,
        state=state,
        spec=spec,
    )


def _with_checks(
    run: TrainingRun, divergence: DivergenceCheck | None, env_step: Callable[..., None] | None = None
) -> tuple[Callable[..., None], Callable[..., None]]:
    """The env step (default the native one) and the update, each followed by the divergence
    check when it is on: env steps every K of ``state.step``; separate updates (PPO) every K of
    ``state.updates``."""
    env_step = run.algo.native_step if env_step is None else env_step
    if divergence is None:
        return env_step, run.algo.update
    quantities, flag, every = divergence.quantities, divergence.flag, divergence.every
    update = run.algo.update
    if run.schedule.updates and hasattr(run.state, "updates"):
        update = _checked(update, "updates", every, quantities, flag)
    return _checked(env_step, "step", every, quantities, flag), update


class _NativeLoop:
    """Native envs: the env step (env included) and the update are each one compiled step."""

    def __init__(self, run: TrainingRun, divergence: DivergenceCheck | None = None) -> None:
        self.state, self.schedule, self.algo = run.state, run.schedule, run.algo
        native_step, update = _with_checks(run, divergence)
        steps: list[tuple] = [(native_step, run.config, run.spec.native, run.state)]
        if run.schedule.updates:
            steps.append((update, run.config, run.state))
        self.env_step, *updates = fuse_steps(run.device, *steps)
        self.update = updates[0] if updates else None

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
    """Python-stepped envs: per env step, a fused ``collect``, the env's numpy step, a fused ``store``
    of the transition; then the iteration's fused updates."""

    def __init__(self, run: TrainingRun, divergence: DivergenceCheck | None = None) -> None:
        assert run.spec.make_batch is not None
        self.state, self.schedule, self.algo, self.seed = run.state, run.schedule, run.algo, run.seed
        self.action_space = run.spec.action_space  # maps the policy's action rows onto the env's
        self.obs: np.ndarray | None = None
        self.batch = run.spec.make_batch()
        try:
            store, update = _with_checks(run, divergence, run.algo.store)
            steps = [
                (run.algo.collect, run.config, run.state, run.state.transition.obs),
                (store, run.config, run.state),
            ]
            if run.schedule.updates:
                steps.append((update, run.config, run.state))
            self.collect, self.store, *updates = fuse_steps(run.device, *steps)
            self.update = updates[0] if updates else None
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
                self.collect()
                action = to_numpy(state.action)
                if not np.all(np.isfinite(action)):  # the env would refuse it: say why
                    step = int(to_numpy(state.step)[0]) * len(action)
                    raise TrainingDiverged(
                        f"training diverged: the policy's action became NaN or inf at step {step} "
                        f"(its weights diverged). Hint: {DIVERGENCE_HINT}",
                        "action",
                        step,
                        step,
                    )
                physical = self.action_space.from_policy(action)
                obs, reward, terminated, truncated, _ = batch.step(physical)
                self.obs = _finite_rows("observations", obs)
                for array, value in (
                    (transition.next_obs, _finite_rows("final observations", batch.final_obs)),
                    (transition.reward, _finite_rows("rewards", reward)),
                    (transition.terminated, terminated),
                    (transition.truncated, truncated),
                ):
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
        raise ConfigError(
            f"{name}: the env returned NaN or inf (env row {row}); observation "
            "normalization and the policy need finite values"
        )
    return values
