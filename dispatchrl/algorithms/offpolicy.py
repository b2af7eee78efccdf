"""The environment step TD3 and SAC share: act, step the env, store the transition in the replay
buffer, learn. Native envs fuse all of it into one compiled step; Python-stepped envs run ``act``,
then the env from Python, then :func:`store`."""

from collections.abc import Callable
from typing import Any

from .. import checkpoint
from ..devices import Device
from ..envs import env_reset_done, env_step
from ..kernels.core.api import copy, increment
from ..kernels.offpolicy.api import replay_add, track_episodes

__all__ = ["native_step", "store", "validate_checkpoint"]

Act = Callable[[Device, Any, Any, Any], None]       # (device, config, state, obs)
Update = Callable[[Device, Any, Any], None]         # (device, config, state)


def native_step(device: Device, act: Act, update: Update, config: Any, env: Any, state: Any) -> None:
    """One step of a native env and one learning update, fused whole."""
    env_now = state.env_state
    act(device, config, state, env_now.obs)
    copy(device, env_now.obs, state.transition.obs)
    env_step(device, env, env_now, state.action)
    replay_add(device, state.replay, state.transition.obs, state.action, env_now.reward, env_now.obs,
               env_now.terminated, env_now.truncated)
    track_episodes(device, state.episodes, env_now.reward, env_now.terminated, env_now.truncated, state.step)
    env_reset_done(device, env, env_now, state.rng)
    update(device, config, state)
    increment(device, state.step)


def store(device: Device, update: Update, config: Any, state: Any) -> None:
    """Store ``state.transition`` (written by the driver from a Python-stepped env), then learn."""
    transition = state.transition
    replay_add(device, state.replay, transition.obs, state.action, transition.reward, transition.next_obs,
               transition.terminated, transition.truncated)
    track_episodes(device, state.episodes, transition.reward, transition.terminated, transition.truncated,
                   state.step)
    update(device, config, state)
    increment(device, state.step)


def validate_checkpoint(state: Any, values: checkpoint.FieldValues, context: dict[str, Any]) -> None:
    """Checkpoint invariants of a TD3/SAC state (its ``validate_checkpoint``): every step stored
    ``num_envs`` transitions, so the step fixes the replay buffer's size and position, and no
    more episodes ended than env steps were taken."""
    config = context.get("config")
    if config is None:
        return
    n = config.num_envs
    step = values.require("step", 0, config.total_steps // n, "environment steps per env, within total_steps")
    written, capacity = step * n, state.replay.capacity
    for field, expected in (("replay.size", min(written, capacity)), ("replay.position", written % capacity)):
        if values.scalar(field) != expected:
            values.refuse(field, f"= {values.scalar(field)} does not match step {step}: {step} steps × {n} envs "
                                 f"into {capacity} rows give {expected}")
    values.require("episodes.count", 0, written, "episodes finished, at most one per env step")
    values.require("episodes.end_steps", 0, step, "steps at which episodes ended")
    for net in ("actor", "critic1", "critic2", "log_alpha"):  # trained by Adam: at most one update per step
        for name, _ in checkpoint.named_arrays(getattr(state, net, None), f"{net}."):
            if name.endswith(".t."):
                values.require(name[:-1], 0, step, "Adam steps, at most one per env step")
