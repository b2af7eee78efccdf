"""A finished training run: :class:`TrainResult`, its checkpoint (save, resume, load) and its
one-line JSON summary."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import checkpoint
from ..algorithms.protocol import Algorithm
from ..arrays import to_numpy
from ..data import episode_log
from ..devices import Device, Generic
from ..envs import env_reset, env_state
from ..errors import DIVERGENCE_HINT, CheckpointError, ConfigError, TrainingDiverged
from ..spaces import Box, Discrete, Space
from .chunks import episode_ring_capacity
from .envspec import EnvSpec, check_action_space, critic_observation_dim, resolve_env
from .trust import check_checkpoint_code, check_run_metadata, in_memory

__all__ = [
    "DIVERGENCE_HINT",
    "EPISODE_LOG_4",
    "HISTORY_KEYS",
    "RENAMED_FIELDS",
    "SCRATCH_FIELDS_5",
    "SCRATCH_SINCE_5",
    "EpisodeHistory",
    "Snapshot",
    "TrainResult",
    "action_space_metadata",
    "build_state",
    "check_finite_state",
    "check_history",
    "config_from_metadata",
    "history_arrays",
    "load_run",
    "pop_history",
    "recorded_action_space",
    "restore_for_resume",
    "save_run",
    "snapshot",
]


@dataclass(kw_only=True)
class TrainResult:
    algo: str
    env: str
    device: Device
    seed: int
    steps: int
    config: Any
    policy: Callable[[np.ndarray], np.ndarray]  # a deployable Policy (or a user network's): numpy obs -> action
    history: dict[str, np.ndarray]  # "steps", "returns", "lengths" of finished training episodes (all of the run)
    train_seconds: float  # the training loop only
    compile_seconds: float  # building the state, tracing and compiling (or loading) the steps
    state: Any  # every Array of the run (for checkpoints)
    spec: EnvSpec
    #: the steps ``policy`` was taken at: ``steps`` (the final weights) unless a hook deployed an
    #: earlier policy (EvalCallback's ``deploy_best``)
    policy_steps: int | None = None

    def summary(self) -> dict[str, Any]:
        returns = self.history["returns"]
        return {
            "algo": self.algo,
            "env": self.env,
            "device": type(self.device).__name__.lower(),
            "seed": self.seed,
            "steps": self.steps,
            "train_seconds": round(self.train_seconds, 4),
            "compile_seconds": round(self.compile_seconds, 4),
            "episodes": len(returns),
            "recent_return": None if len(returns) == 0 else round(float(np.mean(returns[-10:])), 3),
            "policy_steps": self.steps if self.policy_steps is None else self.policy_steps,
        }

    def save(self, path: str | Path, keep: int | None = None) -> tuple[Path, Path]:
        """Checkpoint the whole training state (npz + json, never pickle); ``keep=K``: into
        directory ``path``, keeping the newest K (see :func:`dispatchrl.checkpoint.save`)."""
        return save_run(path, self.algo, self.spec, self.config, self.seed, self.steps, self.state, keep, self.history)


def save_run(
    path: str | Path,
    name: str,
    spec: EnvSpec,
    config: Any,
    seed: int,
    steps: int,
    state: Any,
    keep: int | None = None,
    history: Mapping[str, np.ndarray] | None = None,
) -> tuple[Path, Path]:
    """Checkpoint a run's whole state, its ``history`` of finished episodes and the metadata that
    :func:`load_run` and a resume check;
    ``steps`` is the run's budget when it finishes, or the steps taken so far mid-run (and names
    the file when ``keep`` rotates checkpoints in directory ``path``). A state holding NaN or inf
    is refused (:class:`TrainingDiverged`) before anything is written: it could not be resumed,
    and the checkpoint it would replace stays as it is."""
    check_finite_state(state, steps)
    metadata = run_metadata(name, spec, config, seed, steps)
    return checkpoint.save(path, state, metadata, keep=keep, extra=history_arrays(history))


def check_finite_state(state: Any, steps: int) -> None:
    """Raise :class:`TrainingDiverged` naming the first float Array of ``state`` holding NaN or
    inf (e.g. a run trained with the divergence check off, ``check_every=0``)."""
    for name, array in checkpoint.named_arrays(state):
        values = to_numpy(array)
        if values.dtype.kind == "f" and not np.all(np.isfinite(values)):
            raise TrainingDiverged(
                f"training diverged: {name.rstrip('.')} holds NaN or inf at step {steps}; not saved. "
                f"Hint: {DIVERGENCE_HINT}",
                name.rstrip("."),
                steps,
                steps,
            )


def run_metadata(name: str, spec: EnvSpec, config: Any, seed: int, steps: int) -> dict[str, Any]:
    """What a checkpoint records about its run besides the arrays."""
    return {
        "algo": name,
        "env": spec.name,
        "num_envs": config.num_envs,
        "seed": seed,
        "steps": steps,
        "config": dataclasses.asdict(config),
        "obs_dim": spec.obs_dim,
        "action_dim": spec.action_dim,
        **action_space_metadata(spec.action_space),
        "eval_id": spec.eval_id,
    }


def action_space_metadata(space: Space) -> dict[str, Any]:
    """A Box's bounds (``action_low``/``action_high``), a Discrete's ``action_n``."""
    if isinstance(space, Discrete):
        return {"action_n": space.n}
    return {"action_low": space.low.tolist(), "action_high": space.high.tolist()}


def recorded_action_space(meta: Mapping[str, Any]) -> Space:
    """The action space a checkpoint's metadata records (see :func:`run_metadata`)."""
    if "action_n" in meta:
        return Discrete(meta["action_n"])
    return Box(meta["action_low"], meta["action_high"])


@dataclass
class Snapshot:
    """A checkpoint held in memory (what :func:`dispatchrl.checkpoint.load` returns for a file):
    ``train(..., resume=snapshot)`` continues the run in-process, bit for bit, without a file."""

    metadata: dict[str, Any]
    arrays: dict[str, np.ndarray]


def snapshot(
    name: str,
    spec: EnvSpec,
    config: Any,
    seed: int,
    steps: int,
    state: Any,
    history: Mapping[str, np.ndarray] | None = None,
) -> Snapshot:
    """Copies of every saved Array of ``state`` and of ``history`` with the run's metadata."""
    arrays = {key.rstrip("."): to_numpy(array) for key, array in checkpoint.named_arrays(state)}
    arrays.update(history_arrays(history))
    return Snapshot(run_metadata(name, spec, config, seed, steps), arrays)


# ---------------------------------------------------------------- the history of finished episodes

#: what a history holds per finished episode: the env step (over all envs) it ended at, its
#: return and its length; checkpoints save them as ``history.<key>``
HISTORY_KEYS = {"steps": np.int64, "returns": np.float64, "lengths": np.int64}


class EpisodeHistory:
    """A run's finished training episodes on the host. The device's episode log keeps only the
    latest ones in a ring; :meth:`read` copies the new ones at every chunk boundary."""

    def __init__(self, saved: Mapping[str, np.ndarray] | None = None, read: int = 0) -> None:
        self.parts: dict[str, list[np.ndarray]] = {
            key: [np.asarray(saved[key], dtype) if saved else np.zeros(0, dtype)] for key, dtype in HISTORY_KEYS.items()
        }
        self.read_count = read  # episodes of the device's log copied so far (its count then)

    def read(self, log: Any, num_envs: int) -> int:
        """Append the episodes ``log`` finished since the last read; returns how many."""
        ends, returns, lengths = log.since(self.read_count)
        if len(returns):
            for key, values in zip(HISTORY_KEYS, (ends * num_envs, returns, lengths)):
                self.parts[key].append(values)
            self.read_count += len(returns)
        return len(returns)

    def __len__(self) -> int:
        return sum(len(part) for part in self.parts["returns"])

    def arrays(self) -> dict[str, np.ndarray]:
        """``{"steps", "returns", "lengths"}`` of every finished episode, oldest first."""
        for key, parts in self.parts.items():
            if len(parts) > 1:
                self.parts[key] = [np.concatenate(parts)]
        return {key: parts[0] for key, parts in self.parts.items()}

    def since(self, first: int) -> dict[str, np.ndarray]:
        """The episodes from number ``first`` (0: the run's first) on."""
        return {key: values[first:] for key, values in self.arrays().items()}

    def recent_returns(self, episodes: int) -> np.ndarray:
        """The returns of the last ``episodes`` finished episodes (fewer before that many)."""
        tail: list[np.ndarray] = []
        for part in reversed(self.parts["returns"]):
            tail.insert(0, part)
            if sum(len(p) for p in tail) >= episodes:
                break
        return np.concatenate(tail)[-episodes:] if tail else np.zeros(0)


def history_arrays(history: Mapping[str, np.ndarray] | None) -> dict[str, np.ndarray]:
    """A history's checkpoint entries, ``history.<key>`` (none for None)."""
    if history is None:
        return {}
    return {f"history.{key}": np.asarray(history[key], dtype) for key, dtype in HISTORY_KEYS.items()}


def pop_history(arrays: dict[str, np.ndarray], source: str) -> dict[str, np.ndarray]:
    """Take a checkpoint's history entries out of ``arrays`` (before the state is restored from
    the rest), checked on their own: all or none of them, 1-D of one length, the right dtypes,
    finite returns, non-negative steps and lengths. None (older files of other writers): empty."""
    found = {key: arrays.pop(f"history.{key}") for key in HISTORY_KEYS if f"history.{key}" in arrays}
    if not found:
        return {key: np.zeros(0, dtype) for key, dtype in HISTORY_KEYS.items()}
    missing = sorted(f"history.{key}" for key in set(HISTORY_KEYS) - set(found))
    if missing:
        raise CheckpointError(f"{source} does not match this run: missing {missing}")
    length = len(found["returns"]) if found["returns"].ndim == 1 else -1
    for key, dtype in HISTORY_KEYS.items():
        value = found[key]
        if value.ndim != 1 or value.dtype != dtype or len(value) != length:
            raise CheckpointError(
                f"{source}: 'history.{key}' has shape {value.shape} {value.dtype}, expected "
                f"({max(length, 0)},) {np.dtype(dtype).name} (one entry per finished episode)"
            )
        checkpoint.check_values(source, f"history.{key}", value, "steps and lengths are never negative")
    return found


def check_history(history: Mapping[str, np.ndarray], state: Any, num_envs: int, source: str) -> None:
    """A restored run's history against its state: no more episodes than the log counted, none
    ending after the run's step."""
    count, steps = int(to_numpy(state.episodes.count)[0]), int(to_numpy(state.step)[0]) * num_envs
    if len(history["returns"]) > count:
        raise CheckpointError(
            f"{source}: 'history.returns' holds {len(history['returns'])} episodes, more than the "
            f"{count} 'episodes.count' says finished"
        )
    if len(history["steps"]) and int(history["steps"].max()) > steps:
        raise CheckpointError(
            f"{source}: 'history.steps' = {int(history['steps'].max())} is outside its allowed range "
            f"[0, {steps}] (episodes end by the run's step)"
        )


def build_state(algo: Algorithm, device: Device, spec: EnvSpec, config: Any, seed: int) -> Any:
    """The algorithm's state with the driver's parts attached: the episode log (its ring sized
    for a chunk of the driver's) and, for native envs, the env state (reset from the run's
    stream)."""
    check_action_space(algo, spec)
    critic = critic_observation_dim(spec, config)
    extra = {} if critic is None else {"critic_obs_dim": critic}  # asymmetric_critic only (TD3, SAC)
    state = algo.build(device, config, spec.obs_dim, spec.action_space, seed, **extra)
    capacity = episode_ring_capacity(config.num_envs, algo.schedule(config).env_steps)
    state.episodes = episode_log(device, config.num_envs, capacity)
    if spec.native is not None:
        state.env_state = env_state(device, spec.native)
        env_reset(device, spec.native, state.env_state, state.rng)
    return state


#: State fields renamed since checkpoint format 1 was first written (old → new); checkpoints
#: with the old names still load
RENAMED_FIELDS = {
    "io": "transition",
    "log": "episodes",
    "critic_in": "critic_input",
    "critic_next_in": "critic_next_input",
    "actor_critic_in": "actor_critic_input",
    "d_critic_in": "d_critic_input",
    "perm": "permutation",
    "info": "update_stats",
    "lr": "learning_rate",
}


@checkpoint.migration(from_version=2)
def _rename_state_fields(document: dict[str, Any], arrays: dict[str, np.ndarray]) -> tuple[dict[str, Any], dict]:
    """Checkpoint version 2 → 3: the State fields in :data:`RENAMED_FIELDS` got their new names."""
    renamed = {}
    for name, value in arrays.items():
        field, dot, rest = name.partition(".")
        new = RENAMED_FIELDS.get(field)
        renamed[f"{new}{dot}{rest}" if new is not None and f"{new}{dot}{rest}" not in arrays else name] = value
    document["version"] = 3
    return document, renamed


#: State fields added in checkpoint format 4 (the learner statistics logging reads), per
#: algorithm: name → size (float64). A format-3 checkpoint loads with them zeroed: they are
#: running sums training never reads, so the resumed run trains bit for bit as before.
ADDED_FIELDS_4 = {
    "td3": {"critic_stats": 3, "actor_stats": 2},
    "sac": {"critic_stats": 3, "actor_stats": 3},
    "ppo": {"explained_variance": 1},
}


@checkpoint.migration(from_version=3)
def _add_learner_statistics(document: dict[str, Any], arrays: dict[str, np.ndarray]) -> tuple[dict[str, Any], dict]:
    """Checkpoint version 3 → 4: the fields in :data:`ADDED_FIELDS_4`, zeroed, where missing."""
    for name, size in ADDED_FIELDS_4.get(str(document.get("algo")), {}).items():
        arrays.setdefault(name, np.zeros(size, np.float64))
    document["version"] = 4
    return document, arrays


#: State fields version 5 stopped saving (:data:`dispatchrl.checkpoint.SCRATCH`), per algorithm:
#: a version-4 checkpoint holds them (and everything under them) and loads without them
SCRATCH_FIELDS_5 = {
    "td3": (
        "actor_act",
        "actor_batch",
        "critic1_batch",
        "critic2_batch",
        "critic_input",
        "q_target",
        "d_action",
        "batch",
        "transition",
        "action",
    ),
    "sac": (
        "actor_act",
        "actor_train",
        "actor_next",
        "critic1_train",
        "critic2_train",
        "critic1_next",
        "critic2_next",
        "critic1_actor",
        "critic2_actor",
        "act_noise",
        "act_log_prob",
        "pi_noise",
        "pi_action",
        "pi_log_prob",
        "next_noise",
        "next_action",
        "next_log_prob",
        "critic_input",
        "critic_next_input",
        "actor_critic_input",
        "d_critic_input",
        "d_action",
        "q_target",
        "batch",
        "transition",
        "action",
    ),
    "ppo": (
        "actor_act",
        "critic_act",
        "critic_next",
        "actor_train",
        "critic_train",
        "obs_norm",
        "next_obs_norm",
        "action",
        "log_prob",
        "rollout",
        "batch",
        "transition",
    ),
}


#: scratch fields added since version 5, per algorithm: no older checkpoint holds them, so no
#: migration drops them (a test that writes an old file from today's state leaves them out)
SCRATCH_SINCE_5 = {"ppo": ("grad_norm", "return_var", "returns_rows", "next_obs_rows", "critic_rollout")}


#: the episode log's entries version 5 stopped saving (its ring of the latest episodes)
EPISODE_LOG_4 = ("episodes.returns", "episodes.lengths", "episodes.end_steps")


@checkpoint.migration(from_version=4)
def _drop_scratch(document: dict[str, Any], arrays: dict[str, np.ndarray]) -> tuple[dict[str, Any], dict]:
    """Checkpoint version 4 → 5: the scratch fields in :data:`SCRATCH_FIELDS_5` are dropped (a
    resumed run rebuilds them; every step writes them before reading), and the episodes the log
    held become the run's history (a log that had filled up held only its first episodes)."""
    scratch = set(SCRATCH_FIELDS_5.get(str(document.get("algo")), ()))
    arrays = {name: value for name, value in arrays.items() if name.partition(".")[0] not in scratch}
    if all(name in arrays for name in EPISODE_LOG_4):
        returns, lengths, ends = (arrays.pop(name) for name in EPISODE_LOG_4)
        try:
            held = max(0, min(int(arrays["episodes.count"].reshape(-1)[0]), len(returns)))
            num_envs = int(document.get("num_envs", 1))
        except (KeyError, IndexError, TypeError, ValueError):
            held, num_envs = 0, 1  # a damaged file: the restore refuses it
        arrays.update(
            history_arrays({"steps": ends[:held] * num_envs, "returns": returns[:held], "lengths": lengths[:held]})
        )
    document["version"] = 5
    return document, arrays


def restore_for_resume(
    path: str | Path | Snapshot, name: str, spec: EnvSpec, config: Any, state: Any
) -> tuple[int, dict[str, np.ndarray]]:
    """Load checkpoint ``path`` (or an in-memory :class:`Snapshot`) into ``state`` to continue
    the run; returns the run's seed and its history of finished episodes."""
    if isinstance(path, Snapshot):
        meta, arrays, path = path.metadata, dict(path.arrays), "snapshot"
    else:
        meta, arrays = checkpoint.load(path)  # one read: the newest checkpoint may rotate meanwhile
    check_run_metadata(meta, path)
    if meta.get("algo") != name or meta.get("env") != spec.name:
        raise CheckpointError(
            f"checkpoint {path} is a {meta.get('algo')} run on {meta.get('env')}, not {name} on {spec.name}"
        )
    if meta.get("num_envs") != config.num_envs:
        raise CheckpointError(f"checkpoint {path} has num_envs={meta.get('num_envs')}, this run {config.num_envs}")
    history = pop_history(arrays, str(path))
    prepare_resume = getattr(state, "prepare_resume", None)
    if prepare_resume is not None:  # the state's own change of the saved arrays (TD3/SAC: a larger replay ring)
        prepare_resume(arrays, config)
    checkpoint.restore(state, arrays, source=str(path), context={"config": config, "env": spec.native})
    resumed_with = getattr(state, "resumed_with", None)
    if resumed_with is not None:  # config changes the state carries itself (PPO's learning rate)
        resumed_with(config, meta.get("config") or {})
    check_history(history, state, config.num_envs, str(path))
    return int(meta.get("seed", 0)), history


def load_run(
    path: str | Path, algorithms: Mapping[str, Algorithm], device: Device | None = None, trust_code: bool = False
) -> tuple[Algorithm, str, EnvSpec, Any, Any]:
    """(algorithm module, name, spec, config, state) of a checkpoint, restored on ``device``
    (default Generic); ``algorithms`` maps names to algorithm modules (usually ``ALGORITHMS``).
    A user network or env its metadata names is refused unless ``trust_code`` (see
    :mod:`.trust`); the replay ring is restored in memory whatever ``memmap_path`` it names. The
    state is built from the metadata first, so an entry it has no array for is refused from the
    file's directory, unread."""
    planned: dict[str, Any] = {}

    def plan(meta: dict[str, Any]) -> dict[str, tuple[tuple[int | None, ...], Any]]:
        planned.update(_plan_run(meta, path, algorithms, device or Generic(), trust_code))
        leaves = checkpoint.named_arrays(planned["state"])
        expected = {key.rstrip("."): (tuple(array.shape), array.dtype) for key, array in leaves}
        expected.update({f"history.{key}": ((None,), dtype) for key, dtype in HISTORY_KEYS.items()})
        return expected

    meta, arrays = checkpoint.load(path, plan=plan)
    if not planned:  # an older format: planned from its migrated metadata
        planned.update(_plan_run(meta, path, algorithms, device or Generic(), trust_code))
    algo, name, spec, config, state = (planned[key] for key in ("algo", "name", "spec", "config", "state"))
    history = pop_history(arrays, str(path))
    checkpoint.restore(state, arrays, source=str(path), context={"config": config, "env": spec.native})
    check_history(history, state, config.num_envs, str(path))
    return algo, name, spec, config, state


def _plan_run(
    meta: Mapping[str, Any], path: str | Path, algorithms: Mapping[str, Algorithm], device: Device, trust_code: bool
) -> dict[str, Any]:
    """What :func:`load_run` builds from a checkpoint's metadata: its algorithm module, name, env
    spec, config and a fresh state of that run."""
    check_run_metadata(meta, path)
    name: Any = meta.get("algo")
    if name not in algorithms:
        raise CheckpointError(f"checkpoint {path}: unknown algorithm {name!r}; expected one of {sorted(algorithms)}")
    algo = algorithms[name]
    config = config_from_metadata(algo, meta, path)
    check_checkpoint_code(meta, config, path, trust_code)
    config = in_memory(config)  # a checkpoint never chooses where files are written
    try:
        spec = resolve_env(meta["env"], config.num_envs)
        seed = int(meta["seed"])
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"checkpoint {path}: metadata does not describe a run: {e}") from None
    if (meta.get("obs_dim"), meta.get("action_dim")) != (spec.obs_dim, spec.action_dim):
        raise CheckpointError(
            f"checkpoint {path}: dimensions {meta.get('obs_dim')}, {meta.get('action_dim')} do "
            f"not match env {spec.name} ({spec.obs_dim}, {spec.action_dim}): the env's description changed "
            "since the checkpoint was written (see docs/changelog.md); train it again"
        )
    state = build_state(algo, device, spec, config, seed)
    return {"algo": algo, "name": name, "spec": spec, "config": config, "state": state}


def config_from_metadata(algo: Algorithm, meta: Mapping[str, Any], path: str | Path) -> Any:
    """The run's ``algo.Config`` as a checkpoint's metadata recorded it (validated)."""
    try:
        fields = dict(meta["config"])
        fields["hidden"] = tuple(fields.get("hidden", ()))
        config = algo.Config(**fields)
        config.validate()
    except (KeyError, TypeError, ValueError, ConfigError) as e:
        raise CheckpointError(f"checkpoint {path}: metadata does not describe a run: {e}") from None
    return config
