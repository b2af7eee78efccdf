"""A deployable deterministic policy: an MLP plus observation normalisation and action scaling."""

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from ..arrays import to_numpy
from ..errors import ShapeError
from ..spaces import Box
from .mlp import MLP

__all__ = ["Policy"]


@dataclass
class Policy:
    """``action = low + (tanh-squashed net output + 1) / 2 * (high - low)`` when ``squash`` is
    "tanh" (TD3/SAC actors end in tanh already, so the net output is in [-1, 1]); with "clip" the
    raw output is clipped to [low, high] (PPO's Gaussian mean); with "argmax" the action is the
    index of the largest output (int64: DQN's Q-values, categorical PPO's logits; the bounds are
    unused). Observations are normalised as ``(obs - obs_mean) / obs_std`` first when those are
    given."""

    weights: list  # host float32 arrays (in, out) per layer
    biases: list  # host float32 arrays (out,) per layer
    activation: str
    output_activation: str
    action_low: np.ndarray
    action_high: np.ndarray
    squash: str = "tanh"
    obs_mean: np.ndarray | None = field(default=None)
    obs_std: np.ndarray | None = field(default=None)

    @classmethod
    def from_mlp(cls, net: MLP, action_low, action_high, squash="tanh", obs_mean=None, obs_std=None) -> "Policy":
        return cls(
            [to_numpy(w.value) for w in net.weights],
            [to_numpy(b.value) for b in net.biases],
            net.activation,
            net.output_activation,
            np.asarray(action_low, np.float32),
            np.asarray(action_high, np.float32),
            squash,
            obs_mean,
            obs_std,
        )

    @cached_property
    def _box(self) -> Box:
        """The action bounds as a Box, made once: a policy acts thousands of times in an evaluation."""
        return Box(self.action_low, self.action_high)

    @property
    def observation_dim(self) -> int:
        return self.weights[0].shape[0]

    @property
    def action_dim(self) -> int:
        return self.weights[-1].shape[1]

    def __call__(self, obs) -> np.ndarray:
        """Actions for a batch (B, obs_dim) or a single observation (obs_dim,), in float32."""
        obs = np.asarray(obs, dtype=np.float32)
        single = obs.ndim == 1
        x = obs[None] if single else obs
        if x.ndim != 2 or x.shape[1] != self.observation_dim:
            raise ShapeError(
                f"policy: argument 'obs' has shape {obs.shape}, expected "
                f"({self.observation_dim},) or (batch, {self.observation_dim})"
            )
        if self.obs_mean is not None:
            x = (x - self.obs_mean) / self.obs_std
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            x = x @ w + b
            act = self.output_activation if i == len(self.weights) - 1 else self.activation
            x = _ACTIVATIONS[act](x)
        if self.squash == "argmax":
            index = np.argmax(x, axis=1)
            return index[0] if single else index
        x = self._box.squash(x, "tanh" if self.squash == "tanh" else "clip")
        x = x.astype(np.float32)
        return x[0] if single else x


def _gelu(x) -> np.ndarray:
    from scipy.special import erf

    return 0.5 * x * (1 + erf(x / np.sqrt(2)))


_ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "identity": lambda x: x,
    "relu": lambda x: np.maximum(x, 0),
    "tanh": np.tanh,
    "gelu": _gelu,
}
