"""A finished training run: :class:`TrainResult`, its checkpoint (save, resume, load) and its
one-line JSON summary."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import checkpoint
from ..arrays import to_numpy
from ..devices import Device, Generic
from ..envs import env_reset, env_state
from ..errors import CheckpointError, TrainingDiverged
from .envspec import EnvSpec, resolve_env
from .protocol import Algorithm

__all__ = [
    "DIVERGENCE_HINT",
    "RENAMED_FIELDS",
    "SCRATCH_FIELDS_5",
    "Snapshot",
    "TrainResult",
    "build_state",
    "check_finite_state",
    "config_from_metadata",
    "load_run",
    "restore_for_resume",
    "result_json",
    "save_run",
    "snapshot",
]

#: the one-line advice of a diverged run (the CLI prints it)
DIVERGENCE_HINT = (
    "lower the learning rates (actor_lr/critic_lr, PPO: lr), check the env's rewards and "
    "observations, or resume from the last good checkpoint with other settings"
)


@dataclass
class TrainResult:
    algo: str
    env: str
    device: Device
    seed: int
    steps: int
    config: Any
    policy: Callable[[np.ndarray], np.ndarray]  # a deployable Policy (or a user network's): numpy obs -> action
    history: dict[str, np.ndarray]  # "steps", "returns", "lengths" of finished training episodes
    train_seconds: float  # the training loop only
    compile_seconds: float  # building the state, tracing and compiling (or loading) the steps
    state: Any  # every Array of the run (for checkpoints)
    spec: EnvSpec

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
        }

    def save(self, path: str | Path, keep: int | None = None) -> tuple[Path, Path]:
        """Checkpoint the whole training state (npz + json, never pickle); ``keep=K``: into
        directory ``path``, keeping the newest K (see :func:`dispatchrl.checkpoint.save`)."""
        return save_run(path, self.algo, self.spec, self.config, self.seed, self.steps, self.state, keep)


def save_run(
    path: str | Path, name: str, spec: EnvSpec, config: Any, seed: int, steps: int, state: Any, keep: int | None = None
) -> tuple[Path, Path]:
    """Checkpoint a run's whole state with the metadata that :func:`load_run` and a resume check;
    ``steps`` is the run's budget when it finishes, or the steps taken so far mid-run (and names
    the file when ``keep`` rotates checkpoints in directory ``path``). A state holding NaN or inf
    is refused (:class:`TrainingDiverged`) before anything is written: it could not be resumed,
    and the checkpoint it would replace stays as it is."""
    check_finite_state(state, steps)
    return checkpoint.save(path, state, run_metadata(name, spec, config, seed, steps), keep=keep)


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
        "action_low": spec.action_low.tolist(),
        "action_high": spec.action_high.tolist(),
        "eval_id": spec.eval_id,
    }


@dataclass
class Snapshot:
    """A checkpoint held in memory (what :func:`dispatchrl.checkpoint.load` returns for a file):
    ``train(..., resume=snapshot)`` continues the run in-process, bit for bit, without a file."""

    metadata: dict[str, Any]
    arrays: dict[str, np.ndarray]


def snapshot(name: str, spec: EnvSpec, config: Any, seed: int, steps: int, state: Any) -> Snapshot:
    """Copies of every Array of ``state`` with the run's metadata."""
    arrays = {key.rstrip("."): to_numpy(array) for key, array in checkpoint.named_arrays(state)}
    return Snapshot(run_metadata(name, spec, config, seed, steps), arrays)


def result_json(result: TrainResult, eval_return: float, eval_returns: list[float]) -> str:
    return json.dumps(
        {**result.summary(), "eval_return": round(eval_return, 3), "eval_returns": [round(r, 3) for r in eval_returns]}
    )


def build_state(algo: Algorithm, device: Device, spec: EnvSpec, config: Any, seed: int) -> Any:
    """The algorithm's state, plus the env state (reset from the run's stream) for native envs."""
    state = algo.build(device, config, spec.obs_dim, spec.action_dim, seed)
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


@checkpoint.migration(from_version=4)
def _drop_scratch(document: dict[str, Any], arrays: dict[str, np.ndarray]) -> tuple[dict[str, Any], dict]:
    """Checkpoint version 4 → 5: the scratch fields in :data:`SCRATCH_FIELDS_5` are dropped (a
    resumed run rebuilds them; every step writes them before reading)."""
    scratch = set(SCRATCH_FIELDS_5.get(str(document.get("algo")), ()))
    arrays = {name: value for name, value in arrays.items() if name.partition(".")[0] not in scratch}
    document["version"] = 5
    return document, arrays


def restore_for_resume(path: str | Path | Snapshot, name: str, spec: EnvSpec, config: Any, state: Any) -> int:
    """Load checkpoint ``path`` (or an in-memory :class:`Snapshot`) into ``state`` to continue
    the run; returns the run's seed."""
    if isinstance(path, Snapshot):
        meta, arrays, path = path.metadata, dict(path.arrays), "snapshot"
    else:
        meta, arrays = checkpoint.load(path)  # one read: the newest checkpoint may rotate meanwhile
    if meta.get("algo") != name or meta.get("env") != spec.name:
        raise CheckpointError(
            f"checkpoint {path} is a {meta.get('algo')} run on {meta.get('env')}, not {name} on {spec.name}"
        )
    if meta.get("num_envs") != config.num_envs:
        raise CheckpointError(f"checkpoint {path} has num_envs={meta.get('num_envs')}, this run {config.num_envs}")
    if getattr(state, "replay", None) is not None:  # on-policy states (PPO) have no replay buffer
        _grow_replay(arrays, state.replay.capacity, config.num_envs)
    checkpoint.restore(state, arrays, source=str(path), context={"config": config, "env": spec.native})
    return int(meta.get("seed", 0))


def _grow_replay(arrays: dict[str, np.ndarray], capacity: int, num_envs: int) -> None:
    """A run resumed with a larger total budget gets a larger replay buffer (capacity defaults to
    total steps). That is exact while the old buffer has never wrapped: rows keep their places."""
    old = arrays.get("replay.obs")
    if old is None or old.ndim != 2 or old.shape[0] >= capacity:
        return
    size = int(arrays["replay.size"][0])
    if int(arrays["replay.position"][0]) != size % old.shape[0]:
        raise CheckpointError("checkpoint replay buffer is inconsistent (position vs size)")
    written = int(arrays["step"][0]) * num_envs
    if written > old.shape[0]:
        raise CheckpointError(
            f"cannot grow a replay buffer that has wrapped ({written} transitions "
            f"written into {old.shape[0]} rows); resume with the original total_steps"
        )
    for field in ("obs", "action", "reward", "next_obs", "terminated", "truncated"):
        key = f"replay.{field}"
        grown = np.zeros((capacity, *arrays[key].shape[1:]), arrays[key].dtype)
        grown[: old.shape[0]] = arrays[key]
        arrays[key] = grown
    arrays["replay.position"] = np.array([size], np.int64)


def load_run(
    path: str | Path, algorithms: Mapping[str, Algorithm], device: Device | None = None
) -> tuple[Algorithm, str, EnvSpec, Any, Any]:
    """(algorithm module, name, spec, config, state) of a checkpoint, restored on ``device``
    (default Generic); ``algorithms`` maps names to algorithm modules (usually ``ALGORITHMS``)."""
    meta, arrays = checkpoint.load(path)
    name = meta.get("algo")
    if name not in algorithms:
        raise CheckpointError(f"checkpoint {path}: unknown algorithm {name!r}; expected one of {sorted(algorithms)}")
    algo = algorithms[name]
    config = config_from_metadata(algo, meta, path)
    try:
        spec = resolve_env(meta["env"], config.num_envs)
        seed = int(meta["seed"])
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"checkpoint {path}: metadata does not describe a run: {e}") from None
    if (meta.get("obs_dim"), meta.get("action_dim")) != (spec.obs_dim, spec.action_dim):
        raise CheckpointError(
            f"checkpoint {path}: dimensions {meta.get('obs_dim')}, {meta.get('action_dim')} do "
            f"not match env {spec.name} ({spec.obs_dim}, {spec.action_dim})"
        )
    state = build_state(algo, device or Generic(), spec, config, seed)
    checkpoint.restore(state, arrays, source=str(path), context={"config": config, "env": spec.native})
    return algo, name, spec, config, state


def config_from_metadata(algo: Algorithm, meta: Mapping[str, Any], path: str | Path) -> Any:
    """The run's ``algo.Config`` as a checkpoint's metadata recorded it (validated)."""
    try:
        fields = dict(meta["config"])
        fields["hidden"] = tuple(fields.get("hidden", ()))
        config = algo.Config(**fields)
        config.validate()
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"checkpoint {path}: metadata does not describe a run: {e}") from None
    return config
