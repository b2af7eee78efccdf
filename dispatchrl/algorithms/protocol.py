"""The contract between the training driver and an algorithm module (the registry of the
algorithms dispatchrl ships is :mod:`.registry`).

An algorithm is a module (``td3``, ``sac``, ``ppo``) of plain functions over generic functions;
:class:`Algorithm` spells out what the driver (:mod:`dispatchrl.training.driver`, a layer above)
calls, so a type checker can hold a new algorithm to it; the algorithm never imports the driver. The driver runs *iterations*: ``schedule(config).env_steps`` environment
steps per env (each one fused ``native_step``, or ``act`` → Python env step → ``store``), then
``schedule(config).updates`` fused ``update`` calls (0 where the algorithm updates inside its env
step, as TD3 and SAC do).
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..arrays import Array
from ..data import EpisodeLog, TensorDict
from ..devices import Device
from ..envs import EnvState
from ..nn import PolicyHead

__all__ = ["Algorithm", "AlgorithmConfig", "AlgorithmState", "Schedule"]


@dataclass(frozen=True)
class Schedule:
    """One driver iteration: ``env_steps`` steps of every env, then ``updates`` fused updates
    (0 where the algorithm updates inside its env step, as TD3 and SAC do)."""

    env_steps: int
    updates: int


class AlgorithmConfig(Protocol):
    """The fields and method the driver uses of an algorithm's ``Config`` dataclass."""

    total_steps: int
    num_envs: int

    def validate(self) -> None: ...


class AlgorithmState(Protocol):
    """The fields the driver uses of an algorithm's ``State`` dataclass (all device Arrays)."""

    rng: Array  # the run's random stream (env resets draw from it)
    step: Array  # int64 (1,): environment steps taken, per env
    action: Array  # (N, A) the actions chosen by ``act``, in [-1, 1]
    transition: TensorDict  # N rows (Transitions' keys): the Python-stepped env's transition, written by the driver
    episodes: EpisodeLog | None  # finished episodes, for history and progress (attached by the driver)
    env_state: EnvState | None  # a native env's state (attached by the driver), else None
    # optional: updates (int64 (1,)), the count of separate updates (schedule.updates > 0) that the
    # driver's divergence check runs after every K of;
    # methods a resume calls: prepare_resume(arrays, config) changes the saved arrays
    # before they are restored (TD3/SAC grow the replay ring for a larger budget);
    # resumed_with(config, saved_config) after (PPO takes the new learning rate)


class Algorithm(Protocol):
    """What an algorithm module provides. Functions taking ``device`` are traced and fused into
    compiled steps; they must stay device-free (generic functions only)."""

    NAME: str  # the registry and checkpoint name ("td3")
    ACTION_SPACES: tuple[type, ...]  # the action spaces it takes (dispatchrl.spaces.Box, Discrete)

    @property
    def Config(self) -> type:  # a module's class, read through the protocol
        """The hyperparameters: a dataclass with ``validate()``; see :class:`AlgorithmConfig`."""

    @property
    def State(self) -> type:
        """The training state: a dataclass of device Arrays; see :class:`AlgorithmState`."""

    def config_for(self, env: object) -> Any:
        """The default Config for ``env`` (PPO's budget and hyperparameters depend on it)."""

    def build(self, device: Device, config: Any, obs_dim: int, action_space: Any, seed: int) -> Any:
        """A fresh State (networks initialised from ``seed``), without the parts the driver
        attaches (``episodes``, ``env_state``: None). ``action_space``: the env's
        :class:`~dispatchrl.spaces.Box` or :class:`~dispatchrl.spaces.Discrete`, or an int: a Box
        of that many components for TD3, SAC and PPO (:func:`~dispatchrl.spaces.as_action_space`),
        the number of actions for DQN."""

    def schedule(self, config: Any) -> Schedule:
        """How many env steps and fused updates make one driver iteration."""

    def native_step(self, device: Device, config: Any, env: Any, state: Any) -> None:
        """One step of a native env (``state.env_state``), fused whole: act, step, store, reset."""

    def act(
        self, device: Device, config: Any, state: Any, obs: Array, action: Array, deterministic: bool = False
    ) -> None:
        """The algorithm's one act program (:mod:`~dispatchrl.algorithms.acting`): ``action`` for
        ``obs`` as training explores at ``state.step``, or (``deterministic``) the action its
        :meth:`policy_head` describes; changes nothing else of ``state`` but its random stream and
        acting scratch."""

    def collect(self, device: Device, config: Any, state: Any, obs: Array) -> None:
        """Training's acting: ``act`` into ``state.action``, with what :meth:`store` will need (the
        first fused half for Python-stepped envs)."""

    def store(self, device: Device, config: Any, state: Any) -> None:
        """Record ``state.transition`` (the second fused half for Python-stepped envs)."""

    def update(self, device: Device, config: Any, state: Any) -> None:
        """One gradient update: fused on its own and run ``schedule(config).updates`` times per
        iteration, or (updates == 0) called by the algorithm's own ``native_step``/``store``."""

    def check_iteration(self, state: Any) -> None:
        """Host-side check of the env steps just run, before their updates (with updates == 0,
        once per chunk); raises a dispatchrl error."""

    def policy_head(self, state: Any) -> PolicyHead:
        """How the deterministic action comes out of the actor (the host policy and the exported
        trainer's act program both derive from it)."""

    def memory_estimate(
        self, config: Any, obs_dim: int, action_dim: int, episodes: int, critic_obs_dim: int | None
    ) -> list[Any]:
        """The large buffers the state will hold, as :class:`~dispatchrl.algorithms.memory.Allocation`
        rows (checked against the memory available before anything is allocated; an algorithm
        without it gets :func:`~dispatchrl.algorithms.memory.estimate`'s replay-or-rollout guess)."""

    def watched(self, state: Any) -> list[tuple[str, Array]]:
        """The state's arrays a divergence shows in, labelled, most likely cause first (its losses'
        targets, then every network's parameters): the driver's divergence check reads them,
        then the observation and reward, and reports the first one found non-finite."""

    def policy(self, state: Any, action_low: Any, action_high: Any) -> Callable[[np.ndarray], np.ndarray]:
        """The deterministic, deployable policy on numpy observations in physical action units
        (``nn.head_policy(policy_head(state), Box(action_low, action_high))``)."""
