"""Evaluation that means flying: from the task's random initial states, does the policy bring the
vehicle to the target and hold it there?"""

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from ...arrays import asarray, to_numpy
from ...devices import CPU
from ...errors import ConfigError
from ...kernels.random.api import rng
from ...staging import fuse
from ..api import env_reset, env_state, env_step
from .layout import POS, VEL

__all__ = ["FLIGHT_SEED", "flight_metrics"]

#: the reset stream of the flight evaluation (disjoint from training's seeds, which are small)
FLIGHT_SEED = 10_000


def flight_metrics(
    policy: Callable[[np.ndarray], np.ndarray],
    env: Any,
    flights: int = 100,
    seconds: float = 5.0,
    seed: int = FLIGHT_SEED,
    position_tolerance: float = 0.1,
    speed_tolerance: float = 0.2,
) -> dict[str, float]:
    """Fly ``flights`` vehicles from the initial-state distribution of ``env`` (a Multirotor) (disturbances and
    observation noise included) for ``seconds`` with the deterministic ``policy`` (a batch of
    observations → a batch of actions in [-1, 1]), all at once on the CPU kernels.

    ``eval_success``: the fraction that end within ``position_tolerance`` m of the target, slower
    than ``speed_tolerance`` m/s, having never left the termination box. ``eval_position_rmse``:
    the root-mean-square distance to the target over every step of every flight (m), ``eval_final_
    position_error``: the median distance at the end."""
    if not hasattr(env, "without_curriculum"):  # the Multirotor (env.py imports this module)
        raise ConfigError(f"flight_metrics: 'env' must be a Multirotor, got {type(env).__name__}")
    if flights < 1:
        raise ConfigError(f"flight_metrics: 'flights' must be >= 1, got {flights}")
    task = dataclasses.replace(env.without_curriculum(), num_envs=flights, max_episode_steps=2**62)
    device = CPU()
    state, stream = env_state(device, task), rng(device, seed)
    env_reset(device, task, state, stream)
    action = asarray(device, np.zeros((flights, 4), np.float32))
    # staged once: each step is then one compiled call, no dispatch or argument checks
    step = fuse(device, lambda device: env_step(device, task, state, action))
    obs, terminated, position = state.obs.data, state.terminated.data, state.physics.data[:, POS : POS + 3]
    left = np.zeros(flights, bool)
    squared = 0.0
    steps = max(1, round(seconds / task.dt))
    for _ in range(steps):
        with np.errstate(all="ignore"):
            chosen = np.asarray(policy(obs.copy()), np.float32).reshape(flights, 4)
        if not np.all(np.isfinite(chosen)):
            raise ConfigError("flight_metrics: the policy outputs NaN or inf actions")
        action.data[...] = chosen
        step()
        left |= terminated
        squared += float((position**2).sum())
    physics = to_numpy(state.physics)
    distance = np.linalg.norm(physics[:, POS : POS + 3], axis=1)
    speed = np.linalg.norm(physics[:, VEL : VEL + 3], axis=1)
    success = ~left & (distance < position_tolerance) & (speed < speed_tolerance)
    return {
        "eval_success": float(success.mean()),
        "eval_position_rmse": float(np.sqrt(squared / (steps * flights))),
        "eval_final_position_error": float(np.median(distance)),
    }
