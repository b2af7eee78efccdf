"""Which env a run trains on: native envs (fused into the training step) or Python-stepped
batches (gymnasium ids, env instances, VectorEnvs, callables making an env, the threaded MuJoCo
batches), with the facts the driver needs about each."""

import importlib
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import gymnasium
import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, VectorEnv

from ..envs import NativeEnv, from_gymnasium
from ..envs.batch import GymnasiumBatch, VectorBatch
from ..envs.gym import native_eval_env
from ..envs.registry import MUJOCO_ENVS, NAMED_ENVS, mujoco_env  # the built-in envs by name
from ..errors import ConfigError
from ..nn import head_policy
from ..spaces import Box, Discrete, Space, space_names

__all__ = ["NAMED_ENVS", "EnvSpec", "check_action_space", "critic_observation_dim", "resolve_env"]


@dataclass(kw_only=True)
class EnvSpec:
    """What the driver needs to know about an env: how to step it, its action space (physical
    units, for the deployable policy) and which gymnasium id evaluates it."""

    name: str
    native: NativeEnv | None  # a native env description (fused), or None
    make_batch: Callable[[], Any] | None  # () -> batch with reset/step/final_obs/close, or None
    obs_dim: int
    action_space: Space  # a Box's [-1, 1] policy output maps onto its bounds
    eval_id: str | None  # gymnasium id evaluating a policy, or None
    #: makes one gymnasium env evaluating a policy where no id does (a wrapped env instance)
    make_eval_env: Callable[[], gymnasium.Env] | None = None

    @property
    def action_dim(self) -> int:
        """The columns of an action (a Box's components; 1 for a Discrete index)."""
        return self.action_space.columns

    @property
    def action_outputs(self) -> int:
        """The outputs a policy network has per action: a Box's components, a Discrete's n (one
        Q-value or logit per action index); an algorithm's ``build`` gets it as ``action_dim``."""
        return self.action_space.n if isinstance(self.action_space, Discrete) else self.action_space.columns

    @property
    def box(self) -> Box:
        """The action space as a Box (a ConfigError for another space: it has no bounds)."""
        if not isinstance(self.action_space, Box):
            raise ConfigError(f"env {self.name!r}: a {self.action_space} action space has no bounds")
        return self.action_space

    @property
    def action_low(self) -> np.ndarray:
        """The Box's lower bounds, float32 (action_dim,) (checkpoint metadata records them)."""
        return self.box.low

    @property
    def action_high(self) -> np.ndarray:
        return self.box.high

    def deployed_policy(self, algo: Any, state: Any) -> Callable[[np.ndarray], np.ndarray]:
        """``algo``'s deterministic host policy for ``state``, acting in this env's action units:
        its :func:`~dispatchrl.nn.head_policy` on this action space."""
        return head_policy(algo.policy_head(state), self.action_space)


def check_action_space(algo: Any, spec: EnvSpec, algorithms: Mapping[str, Any] | None = None) -> None:
    """Refuse (ConfigError, before anything is built) an env whose action space ``algo`` does not
    take (its ``ACTION_SPACES``), naming the algorithms of ``algorithms`` that take it."""
    takes = algo.ACTION_SPACES
    if isinstance(spec.action_space, takes):
        return
    kind = type(spec.action_space)
    message = (
        f"{algo.NAME}: env {spec.name!r} has a {spec.action_space} action space; "
        f"{algo.NAME} takes {space_names(takes)} action spaces"
    )
    if algorithms is not None:
        takers = sorted(name for name, other in algorithms.items() if kind in other.ACTION_SPACES)
        message += f"; algorithms taking {kind.__name__}: {', '.join(takers) if takers else 'none yet'}"
    raise ConfigError(message)


def critic_observation_dim(spec: EnvSpec, config: Any) -> int | None:
    """The width of the critics' privileged observation for ``config.asymmetric_critic``, or None
    without it; refused (ConfigError) for an env that has none, before anything is built."""
    if not getattr(config, "asymmetric_critic", False):
        return None
    dim = None if spec.native is None else spec.native.critic_observation_dim
    if dim is None:
        raise ConfigError(
            f"asymmetric_critic: env {spec.name!r} has no critic observation; it needs a native env "
            "with critic_observation_dim and env_critic_observation methods (e.g. multirotor)"
        )
    return int(dim)


def _evaluable(env: NativeEnv) -> bool:
    return type(env).evaluation_env is not NativeEnv.evaluation_env


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
        return EnvSpec(
            name=env.name,
            native=env,
            make_batch=None,
            obs_dim=env.observation_dim,
            action_space=env.policy_action_space(),
            eval_id=env.eval_id,
            # an env with no id that says what to evaluate on (the multirotor's variants); others
            # are not evaluated, as before (they may have no CPU methods to step one env with)
            make_eval_env=partial(native_eval_env, env) if env.eval_id is None and _evaluable(env) else None,
        )
    if isinstance(env, str):
        env_id = env
        mujoco = mujoco_env(env_id)
        if mujoco is not None:  # a threaded MuJoCo batch: mujoco is imported when it is made
            batch_class, eval_id = MUJOCO_ENVS[mujoco]
            probe = batch_class(1, num_threads=1)
            make: Callable[[], Any] = partial(batch_class, num_envs)
        else:
            probe = _gymnasium_probe(env_id)
            make, eval_id = _python_batch(lambda: _make(env_id), num_envs), env_id
        obs_dim, space = probe.observation_dim, probe.action_space
        probe.close()
        if isinstance(space, Box):
            space.check_finite(env_id)
        return EnvSpec(name=env_id, native=None, make_batch=make, obs_dim=obs_dim, action_space=space, eval_id=eval_id)
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

    native = [*(name for name in NAMED_ENVS if "-" not in name), *MUJOCO_ENVS]  # the short names, not the ids
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
    if isinstance(probe.action_space, Box):
        probe.action_space.check_finite(name)
    return EnvSpec(
        name=name,
        native=None,
        make_batch=make,
        obs_dim=probe.obs_dim,
        action_space=probe.action_space,
        eval_id=eval_id,
        make_eval_env=make_eval_env,
    )


def _instance_spec(env: gymnasium.Env, num_envs: int) -> EnvSpec:
    """A gymnasium.Env instance, wrappers kept: trained as is with one env; with more, copies
    are made from its spec (which records the wrappers that record their arguments)."""
    spec = env.spec
    batch = GymnasiumBatch([env])  # checks the spaces; reads no state
    dims = _described(batch)
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
    dims = _described(batch)
    spec = envs.spec
    name = f"{spec.id} (VectorEnv)" if spec is not None else type(envs).__name__
    make_eval = (lambda: _make(spec)) if spec is not None else None
    return _python_spec(name, lambda: batch, dims, None, make_eval)


def _described(batch: Any) -> EnvSpec:
    """A batch's dimensions and action space, as an unnamed EnvSpec (for :func:`_python_spec`)."""
    return EnvSpec(
        name="",
        native=None,
        make_batch=None,
        obs_dim=batch.observation_dim,
        action_space=batch.action_space,
        eval_id=None,
    )
