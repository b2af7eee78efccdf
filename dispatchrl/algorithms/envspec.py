"""Which env a run trains on: native envs (fused into the training step) or Python-stepped
batches (gymnasium ids, the threaded MuJoCo Ant), with the facts the driver needs about each."""

import importlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..envs import AcrobotContinuous, NativeEnv, Pendulum, from_gymnasium
from ..errors import ConfigError

__all__ = ["NAMED_ENVS", "EnvSpec", "resolve_env"]


@dataclass
class EnvSpec:
    """What the driver needs to know about an env: how to step it, its action bounds (physical
    units, for the deployable policy) and which gymnasium id evaluates it."""

    name: str
    native: NativeEnv | None  # a native env description (fused), or None
    make_batch: Callable[[], Any] | None  # () -> batch with reset/step/final_obs/close, or None
    obs_dim: int
    action_dim: int
    action_low: np.ndarray
    action_high: np.ndarray
    eval_id: str | None  # gymnasium id evaluating a policy, or None


#: env names the command line and checkpoints use for the built-in native envs → their class
NAMED_ENVS: dict[str, Callable[..., NativeEnv]] = {
    "pendulum": Pendulum,
    "pendulum-v1": Pendulum,
    "acrobot": AcrobotContinuous,
    "acrobotcontinuous-v1": AcrobotContinuous,
}


def _import_env(path: str) -> object:
    """``"package.module:Name"`` → the object it names, or None where it names nothing
    importable (gymnasium ids use the same form, ``"module:Env-v0"``)."""
    module_name, _, attribute = path.partition(":")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())  # as `python -m` would: a user's module next to them imports
    try:
        target: object = importlib.import_module(module_name)
        for part in attribute.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError):
        return None
    return target


def resolve_env(env: object, num_envs: int = 1) -> EnvSpec:
    """``"pendulum"``, ``"acrobot"``, ``"module:NativeEnvClass"``, a gymnasium id, or a native env
    description (any :class:`~dispatchrl.envs.NativeEnv`) → EnvSpec. Native envs run with
    actions in [-1, 1] (their ``training_env()``, e.g. Pendulum: RLtools' normalised torque)."""
    if isinstance(env, str) and env.lower() in NAMED_ENVS:
        env = NAMED_ENVS[env.lower()](num_envs=num_envs)
    elif isinstance(env, str) and ":" in env:
        target = _import_env(env)  # None unless it names a native env: then a gymnasium id
        if isinstance(target, type) and issubclass(target, NativeEnv):
            target = target(num_envs=num_envs)  # type: ignore[call-arg]  # subclasses take num_envs
        env = target if isinstance(target, NativeEnv) else env
    if isinstance(env, NativeEnv):
        env = env.training_env()
        low, high = env.policy_action_bounds()
        return EnvSpec(env.name, env, None, env.observation_dim, env.action_dim, low, high, env.eval_id)
    if isinstance(env, str):
        env_id = env
        if env_id.lower() in ("ant", "ant-v5", "dispatchrl/ant-v5"):
            from ..envs import AntBatch  # lazily: keeps mujoco out of every other run

            probe = AntBatch(1, num_threads=1)
            make, eval_id = (lambda: AntBatch(num_envs)), "dispatchrl/Ant-v5"
        else:
            probe = from_gymnasium(env_id, 1)
            make, eval_id = (lambda: from_gymnasium(env_id, num_envs)), env_id
        dims = (probe.observation_dim, probe.action_dim, probe.action_low, probe.action_high)
        probe.close()
        if not (np.all(np.isfinite(dims[2])) and np.all(np.isfinite(dims[3]))):
            raise ConfigError(f"env {env_id!r}: action bounds must be finite, got {dims[2]}..{dims[3]}")
        return EnvSpec(env_id, None, make, dims[0], dims[1], dims[2], dims[3], eval_id)
    raise ConfigError(f"env: expected 'pendulum', 'acrobot', a gymnasium id or a native env, got {env!r}")
