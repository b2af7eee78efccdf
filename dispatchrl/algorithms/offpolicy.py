"""The environment step TD3 and SAC share: act, step the env, store the transition in the replay
buffer, learn. Native envs fuse all of it into one compiled step; Python-stepped envs run ``act``,
then the env from Python, then :func:`store`."""

from collections.abc import Callable
from typing import Any

from ..devices import Device
from ..envs import env_reset_done, env_step
from ..kernels.core.api import copy, increment
from ..kernels.offpolicy.api import replay_add, track_episodes

__all__ = ["native_step", "store"]

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
