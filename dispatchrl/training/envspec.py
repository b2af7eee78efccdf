"""Which env a run trains on: native envs (fused into the training step) or Python-stepped
batches (gymnasium ids, env instances, VectorEnvs, callables making an env, the threaded MuJoCo
Ant), with the facts the driver needs about each."""

import importlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium
import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, VectorEnv

from ..envs import AcrobotContinuous, NativeEnv, Pendulum, from_gymnasium
from ..envs.batch import GymnasiumBatch, VectorBatch
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
    #: makes one gymnasium env evaluating a policy where no id does (a wrapped env instance)
    make_eval_env: Callable[[], gymnasium.Env] | None = None


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
    """``"pendulum"``, ``"acrobot"``, ``"module:NativeEnvClass"``, a gymnasium id, a native env
    description (any :class:`~dispatchrl.envs.NativeEnv`, or its class), a ``gymnasium.Env``
    instance (wrappers kept), a ``gymnasium.vector.VectorEnv`` or a callable making an env →
    EnvSpec (an EnvSpec passes through). Native envs run with actions in [-1, 1] (their
    ``training_env()``, e.g. Pendulum: RLtools' normalised torque). Python envs with
    ``num_envs`` > 1 step in a ``gymnasium.vector.AsyncVectorEnv`` (one process per env)."""
    if isinstance(env, EnvSpec):
        return env
    if isinstance(env, type) and issubclass(env, NativeEnv):
        env = env(num_envs=num_envs)  # type: ignore[call-arg]  # subclasses take num_envs
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
            probe = _gymnasium_probe(env_id)
            make, eval_id = _python_batch(lambda: _make(env_id), num_envs), env_id
        dims = (probe.observation_dim, probe.action_dim, probe.action_low, probe.action_high)
        probe.close()
        if not (np.all(np.isfinite(dims[2])) and np.all(np.isfinite(dims[3]))):
            raise ConfigError(f"env {env_id!r}: action bounds must be finite, got {dims[2]}..{dims[3]}")
        return EnvSpec(env_id, None, make, dims[0], dims[1], dims[2], dims[3], eval_id)
    if isinstance(env, VectorEnv):
        return _vector_spec(env, num_envs)
    if isinstance(env, gymnasium.Env):
        return _instance_spec(env, num_envs)
    if callable(env):
        made = env()
        if not isinstance(made, gymnasium.Env):
            raise ConfigError(f"env: the callable must return a gymnasium.Env, got {type(made).__name__}")
        spec = _instance_spec(made, 1)
        made.close()
        name = getattr(env, "__qualname__", type(env).__name__)
        return _python_spec(f"{spec.name} (from {name})", _python_batch(env, num_envs), spec, None, env)
    raise ConfigError(
        "env: expected 'pendulum', 'acrobot', a gymnasium id, a native env, a gymnasium.Env, a "
        f"gymnasium.vector.VectorEnv or a callable making an env, got {env!r}"
    )


def _gymnasium_probe(env_id: str) -> Any:
    """One env of gymnasium id ``env_id``; a ConfigError for a name that is neither a native env
    nor a registered gymnasium id lists the native names and suggests the closest of both."""
    import difflib

    native = [*(name for name in NAMED_ENVS if "-" not in name), "ant"]  # the short names, not the ids
    if ":" not in env_id and env_id not in gymnasium.registry:
        try:
            gymnasium.spec(env_id)  # an id without its version (Pendulum) is known too
        except gymnasium.error.Error:
            ids = [i for i in gymnasium.registry if "/" not in i]  # the namespaced ids are noise here
            by_lower = {name.lower(): name for name in [*native, *ids]}
            close = difflib.get_close_matches(env_id.lower(), list(by_lower), n=3, cutoff=0.6)
            hint = f"; did you mean {' or '.join(repr(by_lower[c]) for c in close)}?" if close else ""
            raise ConfigError(
                f"cannot make env {env_id!r}: it is neither a native env ({', '.join(native)}) nor a gymnasium id{hint}"
            ) from None
    try:
        return from_gymnasium(env_id, 1)
    except ConfigError as e:  # from_gymnasium names itself: the user named an env
        raise ConfigError(f"env {env_id!r}: {str(e).removeprefix('from_gymnasium: ')}") from None


def _make(spec: Any) -> gymnasium.Env:
    try:
        return gymnasium.make(spec)
    except gymnasium.error.Error as e:
        raise ConfigError(f"env: cannot make env {getattr(spec, 'id', spec)!r}: {e}") from None


def _python_batch(make_env: Callable[[], gymnasium.Env], num_envs: int) -> Callable[[], Any]:
    """() -> the batch of ``num_envs`` envs made by ``make_env``: one stepped in this process,
    more in an AsyncVectorEnv (env i reset with seed + i either way)."""
    if num_envs == 1:
        return lambda: GymnasiumBatch([make_env()])
    return lambda: VectorBatch(AsyncVectorEnv([make_env] * num_envs, autoreset_mode=AutoresetMode.SAME_STEP))


def _python_spec(
    name: str,
    make: Callable[[], Any],
    probe: Any,
    eval_id: str | None,
    make_eval_env: Callable[[], gymnasium.Env] | None,
) -> EnvSpec:
    low, high = probe.action_low, probe.action_high
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
        raise ConfigError(f"env {name!r}: action bounds must be finite, got {low}..{high}")
    return EnvSpec(name, None, make, probe.obs_dim, probe.action_dim, low, high, eval_id, make_eval_env)


def _instance_spec(env: gymnasium.Env, num_envs: int) -> EnvSpec:
    """A gymnasium.Env instance, wrappers kept: trained as is with one env; with more, copies
    are made from its spec (which records the wrappers that record their arguments)."""
    spec = env.spec
    batch = GymnasiumBatch([env])  # checks the spaces; reads no state
    dims = EnvSpec("", None, None, batch.observation_dim, batch.action_dim, batch.action_low, batch.action_high, None)
    wrappers = [w.name for w in spec.additional_wrappers] if spec is not None else []
    name = "+".join([spec.id, *wrappers]) if spec is not None else type(env.unwrapped).__name__
    eval_id = spec.id if spec is not None and not wrappers else None
    make_eval = (lambda: _make(spec)) if spec is not None else None
    if num_envs == 1:
        return _python_spec(name, lambda: GymnasiumBatch([env]), dims, eval_id, make_eval)
    if make_eval is None:
        raise ConfigError("env: an env instance without a spec cannot be copied for num_envs > 1; pass a callable")
    return _python_spec(name, _python_batch(make_eval, num_envs), dims, eval_id, make_eval)


def _vector_spec(envs: VectorEnv, num_envs: int) -> EnvSpec:
    """A user's VectorEnv: its envs are the run's (num_envs must match)."""
    if envs.num_envs != num_envs:
        raise ConfigError(f"env: the VectorEnv has {envs.num_envs} envs, the config's num_envs is {num_envs}")
    batch = VectorBatch(envs)
    dims = EnvSpec("", None, None, batch.observation_dim, batch.action_dim, batch.action_low, batch.action_high, None)
    spec = envs.spec
    name = f"{spec.id} (VectorEnv)" if spec is not None else type(envs).__name__
    make_eval = (lambda: _make(spec)) if spec is not None else None
    return _python_spec(name, lambda: batch, dims, None, make_eval)
