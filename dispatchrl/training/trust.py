"""What a loaded checkpoint may do: hand over numbers, never choose code or where files go.

A checkpoint's metadata is data from wherever the file came from. Its ``config.network``,
``actor_network`` and ``critic_network`` may name a user constructor (``"module:function"``) and
its ``env`` a user env (``"module:Class"``, or a gymnasium ``"module:Env-v0"``, whose module
gymnasium imports): loading imports none of them unless the caller names the same value itself
or passes ``trust_code`` (the ``weights_only`` of :func:`torch.load`, inverted). Built-in networks
(:data:`dispatchrl.nn.NETWORKS`), native envs by name (:data:`~.envspec.NAMED_ENVS`) and
gymnasium ids without a module load as they are. ``config.memmap_path`` is never honoured from
a checkpoint: loads keep the replay ring in memory, and a resume maps it where the user says.
"""

import dataclasses
from collections.abc import Collection, Mapping
from typing import Any

from ..errors import CheckpointError
from ..nn import NETWORKS
from .envspec import NAMED_ENVS

__all__ = [
    "NETWORK_FIELDS",
    "check_checkpoint_code",
    "check_memmap_named",
    "check_run_metadata",
    "in_memory",
    "names_code",
]

#: the Config fields naming a network constructor
NETWORK_FIELDS = ("network", "actor_network", "critic_network")


def names_code(field: str, value: object) -> bool:
    """Whether the checkpoint value of ``field`` ("env", "eval_id" or a network field) names a
    module to import rather than something dispatchrl or gymnasium's registry holds."""
    if not isinstance(value, str):
        return False
    if field in NETWORK_FIELDS:
        return value not in NETWORKS  # a validated config holds a NETWORKS name or "module:function"
    return ":" in value and value.lower() not in NAMED_ENVS


def check_checkpoint_code(
    meta: Mapping[str, Any], config: Any, source: object, trust_code: bool = False, named: Collection[object] = ()
) -> None:
    """Refuse (:class:`CheckpointError`) a checkpoint whose metadata names user code (see
    :func:`names_code`) the caller did not name itself (``named``: the values it passed) nor
    trust (``trust_code``), before anything is imported."""
    if trust_code:
        return
    values = [(f"config.{field}", getattr(config, field, None)) for field in NETWORK_FIELDS]
    values += [("env", meta.get("env")), ("eval_id", meta.get("eval_id"))]
    unnamed = [
        f"{where}={value!r}"
        for where, value in values
        if names_code(where.removeprefix("config."), value) and value not in named
    ]
    if unnamed:
        raise CheckpointError(
            f"checkpoint {source} names code to import and run: {', '.join(unnamed)}. Loading a checkpoint "
            "never imports what only its metadata names: name the same network or env yourself (CLI: "
            "--network/--actor-network/--critic-network/--env with --resume; Python: train(..., env, config, "
            "resume=...) or load(..., env=...)), or pass --trust-code (trust_code=True) if you trust where "
            "this checkpoint came from"
        )


def check_memmap_named(config: Any, named_path: object, source: object) -> None:
    """Refuse resuming into the memmap folder a checkpoint's metadata names unless the user named
    the same folder (``named_path``): the ring's files are created or overwritten there."""
    path = getattr(config, "memmap_path", None)
    if path is not None and path != named_path:
        raise CheckpointError(
            f"checkpoint {source} keeps its replay ring in memmap_path={path!r}; a checkpoint never chooses "
            "where files are written: name the folder yourself (--memmap-path or --set memmap_path=...) to "
            "map the resumed ring there (its files are overwritten), or --set memmap_path=null --override "
            "to resume with the ring in memory"
        )


def in_memory(config: Any) -> Any:
    """``config`` with its replay ring in memory: what a loaded checkpoint runs with."""
    if getattr(config, "memmap_path", None) is None:
        return config
    return dataclasses.replace(config, memmap_path=None)


#: the run metadata fields and the types they must have (where present)
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "algo": (str,),
    "env": (str,),
    "num_envs": (int,),
    "seed": (int,),
    "steps": (int,),
    "config": (dict,),
    "obs_dim": (int,),
    "action_dim": (int,),
    "action_low": (list,),
    "action_high": (list,),
    "action_n": (int,),
    "eval_id": (str, type(None)),
}


def check_run_metadata(meta: Mapping[str, Any], source: object) -> None:
    """Refuse (:class:`CheckpointError`) run metadata whose fields have the wrong JSON types,
    naming the field, before any of them is used (a missing one is refused where it is needed)."""
    for field, types in _FIELD_TYPES.items():
        if field not in meta:
            continue
        if isinstance(meta[field], bool) or not isinstance(meta[field], types):
            expected = " or ".join("null" if t is type(None) else t.__name__ for t in types)
            raise CheckpointError(
                f"checkpoint {source}: metadata field {field!r} must be {expected}, got {meta[field]!r}"
            )
        value: Any = meta[field]
        if field in ("num_envs", "obs_dim", "action_dim", "action_n") and value < 1:
            raise CheckpointError(f"checkpoint {source}: metadata field {field!r} must be positive, got {value}")
        high = {"seed": 2**31, "steps": 2**63}.get(field)  # train refuses seeds outside [0, 2**31)
        if high is not None and not 0 <= value < high:
            raise CheckpointError(f"checkpoint {source}: metadata field {field!r} must be in [0, {high}), got {value}")
        if field in ("action_low", "action_high") and not all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in value
        ):
            raise CheckpointError(f"checkpoint {source}: metadata field {field!r} must be a list of numbers")
