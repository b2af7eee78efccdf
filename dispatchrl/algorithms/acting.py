"""Acting's one home. Every algorithm's ``act(device, config, state, obs, action, deterministic)``
(the protocol's) is its one act program, in generic functions: it writes ``action`` for ``obs``,
either as training explores (``collect`` calls it with ``state.action``) or as its
:class:`~dispatchrl.nn.PolicyHead` describes the deterministic action (:func:`head_action`, also the
exported C trainer's act program). :class:`ExploringPolicy` runs it for ``predict(...,
deterministic=False)`` on the run's device."""

import dataclasses
from typing import Any

import numpy as np

from ..arrays import Array, assign, to_numpy, zeros
from ..devices import Device
from ..kernels.core.api import argmax, clip, copy, tanh
from ..kernels.offpolicy.api import slice_columns
from ..kernels.random.api import rng
from ..nn import PolicyHead, forward
from ..spaces import Box, Discrete

__all__ = ["ExploringPolicy", "head_act", "head_action"]


def head_action(device: Device, squash: str, out: Array, action: Array) -> None:
    """``action`` ← the deterministic action of a :class:`~dispatchrl.nn.PolicyHead` with
    ``squash`` from its actor's output ``out``: in [-1, 1] units (``"tanh"`` the output itself,
    ``"tanh_mean"`` tanh of its first ``action`` columns, ``"clip"`` clipped to [-1, 1]) or a
    Discrete index held as a float (``"argmax"``)."""
    if squash == "tanh":
        copy(device, out, action)
    elif squash == "clip":
        clip(device, out, -1.0, 1.0, action)
    elif squash == "argmax":
        argmax(device, out, action)
    else:  # "tanh_mean": the Gaussian mean's columns, squashed in place
        slice_columns(device, out, 0, action)
        tanh(device, action, action)


def head_act(device: Device, head: PolicyHead, buffers: Any, obs: Array, action: Array) -> None:
    """``action`` ← ``head``'s deterministic action for ``obs``: its actor's forward pass into
    ``buffers``, then :func:`head_action` (the ``deterministic`` branch of an ``act``)."""
    forward(device, head.actor, buffers, obs)
    head_action(device, head.squash, buffers.output, action)


class ExploringPolicy:
    """``policy(obs) -> action``: the algorithm's act program with ``deterministic=False`` on the
    run's device and state (its networks, their scratch), past the run's warm-up (the actor acts,
    as Stable-Baselines3's ``predict`` does) at the run's current step (DQN's ε), with its own
    random stream seeded by ``seed`` so that predicting does not move training's. Rows run in
    chunks of the state's env count; actions come back in the env's units (numpy)."""

    def __init__(
        self, algo: Any, device: Device, config: Any, state: Any, space: Box | Discrete, obs_dim: int, seed: int
    ) -> None:
        self.algo, self.device, self.config, self.space = algo, device, config, space
        self.source = state
        self.obs = zeros(device, (state.action.shape[0], obs_dim))
        self.action = zeros(device, state.action.shape)
        self.state = dataclasses.replace(state, rng=rng(device, seed), step=zeros(device, 1, np.int64))

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        single = obs.ndim == 1
        rows = np.asarray(obs, np.float32).reshape(-1, self.obs.shape[1])
        past_warmup = max(int(to_numpy(self.source.step)[0]), getattr(self.config, "warmup_steps", 0))
        assign(self.state.step, np.array([past_warmup], np.int64))
        n = self.obs.shape[0]
        out = np.empty((len(rows), self.action.shape[1]), np.float32)
        padded = np.zeros(self.obs.shape, np.float32)
        for start in range(0, len(rows), n):
            chunk = rows[start : start + n]
            padded[: len(chunk)] = chunk
            assign(self.obs, padded)
            self.algo.act(self.device, self.config, self.state, self.obs, self.action)
            out[start : start + len(chunk)] = to_numpy(self.action)[: len(chunk)]
        if isinstance(self.space, Discrete):
            actions = self.space.from_policy(out)[:, 0]
        else:
            actions = np.asarray(self.space.from_policy(out), np.float32)
        return actions[0] if single else actions
