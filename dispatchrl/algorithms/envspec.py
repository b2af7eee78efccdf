"""Which env a run trains on: native envs (fused into the training step) or Python-stepped
batches (gymnasium ids, the threaded MuJoCo Ant), with the facts the driver needs about each."""

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..envs import AcrobotContinuous, Pendulum, from_gymnasium
from ..errors import ConfigError

__all__ = ["EnvSpec", "resolve_env"]


@dataclass
class EnvSpec:
    """What the driver needs to know about an env: how to step it, its action bounds (physical
    units, for the deployable policy) and which gymnasium id evaluates it."""

    name: str
    native: Pendulum | AcrobotContinuous | None   # a native env description (fused), or None
    make_batch: Callable[[], Any] | None          # () -> batch with reset/step/final_obs/close, or None
    obs_dim: int
    action_dim: int
    action_low: np.ndarray
    action_high: np.ndarray
    eval_id: str


def resolve_env(env: object, num_envs: int = 1) -> EnvSpec:
    """``"pendulum"``, ``"acrobot"``, a gymnasium id, or a native env description → EnvSpec.
    Native envs run with actions in [-1, 1] (Pendulum: RLtools' normalised torque)."""
    if isinstance(env, str) and env.lower() in ("pendulum", "pendulum-v1"):
        env = Pendulum(num_envs=num_envs, normalized_actions=True)
    elif isinstance(env, str) and env.lower() in ("acrobot", "acrobotcontinuous-v1"):
        env = AcrobotContinuous(num_envs=num_envs)
    if isinstance(env, Pendulum):
        if not env.normalized_actions:
            env = dataclasses.replace(env, normalized_actions=True)
        torque = np.full(1, env.max_torque, np.float32)
        return EnvSpec("pendulum", env, None, 3, 1, -torque, torque, "Pendulum-v1")
    if isinstance(env, AcrobotContinuous):
        return EnvSpec("acrobot", env, None, 6, 1, env.action_low, env.action_high,
                       "dispatchrl/AcrobotContinuous-v1")
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
