"""The dueling Q network (Wang et al. 2016) as a network type: any network with n + 1 outputs
[V, A_1..A_n] (its ``body``) whose output is combined into n Q-values,
``Q_j = V + A_j - mean_k A_k``, by the :func:`~dispatchrl.kernels.offpolicy.dueling_q` kernel.

It has a method of every :mod:`dispatchrl.nn` network function, so DQN's acting, targets, loss,
target updates and checkpoints use it as they use an MLP: its buffers' ``output`` and
``d_output`` are the (B, n) Q-values and their gradient, and :func:`backward` runs the combine's
gradient (:func:`~dispatchrl.kernels.offpolicy.dueling_q_backward`) into the body's. Its host
policy is the body's with the combine folded into the last layer (it is linear), a plain
n-output MLP policy where the body is an MLP, so what deploys an MLP's argmax deploys it.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..arrays import Array, zeros
from ..errors import ConfigError
from ..kernels.offpolicy.api import dueling_q, dueling_q_backward
from ..nn import Policy, backward, deployable, forward, make_buffers, parameter_groups, raw_output
from ..spaces import Box

__all__ = ["DuelingQBuffers", "DuelingQNetwork", "combine_matrix"]


@dataclass
class DuelingQNetwork:
    """A Q network of n actions made of ``body``, a network with n + 1 outputs [V, A_1..A_n]."""

    body: Any


@dataclass
class DuelingQBuffers:
    """The body's buffers, and the (B, n) Q-values and their gradient (what the algorithm reads
    and writes as any network's ``output``/``d_output``)."""

    body: Any
    output: Array
    d_output: Array

    @property
    def d_in(self) -> Any:
        return self.body.d_in


def combine_matrix(n: int) -> np.ndarray:
    """M (n + 1, n), float64, with Q = [V, A] @ M: a row of ones (V), then I - 1/n (A less its mean)."""
    return np.vstack([np.ones((1, n)), np.eye(n) - 1.0 / n])


@forward.dispatch
def _(device, net: DuelingQNetwork, buffers, x) -> None:
    forward(device, net.body, buffers.body, x)
    dueling_q(device, buffers.body.output, buffers.output)


@backward.dispatch
def _(device, net: DuelingQNetwork, buffers, x, d_output, parameters, input_gradient) -> None:
    dueling_q_backward(device, d_output, buffers.body.d_output)
    backward(device, net.body, buffers.body, x, buffers.body.d_output, parameters, input_gradient)


@make_buffers.dispatch
def _(device, net: DuelingQNetwork, batch, input_gradient) -> DuelingQBuffers:
    body = make_buffers(device, net.body, batch, input_gradient)
    rows, columns = body.output.shape
    if columns < 2:
        raise ConfigError(f"a dueling Q network's body needs n + 1 >= 2 outputs (V, then A per action), got {columns}")
    return DuelingQBuffers(body, zeros(device, (rows, columns - 1)), zeros(device, (rows, columns - 1)))


@parameter_groups.dispatch
def _(net: DuelingQNetwork) -> list:
    return parameter_groups(net.body)  # type: ignore[no-any-return]


@deployable.dispatch
def _(net: DuelingQNetwork, action_low, action_high, squash) -> Callable[[np.ndarray], np.ndarray]:
    body = deployable(net.body, action_low, action_high, squash)
    if isinstance(body, Policy) and body.output_activation == "identity":
        n = body.action_dim - 1
        weights, biases = list(body.weights), list(body.biases)
        weights[-1] = (weights[-1].astype(np.float64) @ combine_matrix(n)).astype(np.float32)
        biases[-1] = (biases[-1].astype(np.float64) @ combine_matrix(n)).astype(np.float32)
        return Policy(
            weights,
            biases,
            body.activation,
            body.output_activation,
            body.action_low,
            body.action_high,
            body.squash,
            body.obs_mean,
            body.obs_std,
        )
    return DuelingPolicy(raw_output(net.body), action_low, action_high, squash)


class DuelingPolicy:
    """The host policy of a dueling network whose body is not an MLP: the body's raw output
    combined on the host (float64), then squashed onto the bounds as any network's policy."""

    def __init__(self, raw: Callable[[np.ndarray], np.ndarray], action_low: Any, action_high: Any, squash: str) -> None:
        self.raw, self.squash = raw, squash
        self.action_low = np.asarray(action_low, np.float32)
        self.action_high = np.asarray(action_high, np.float32)

    def __call__(self, obs: Any) -> np.ndarray:
        raw = np.asarray(self.raw(obs), np.float64)
        q = raw @ combine_matrix(raw.shape[-1] - 1)
        box = Box(self.action_low, self.action_high)
        return box.squash(q, "tanh" if self.squash == "tanh" else "clip").astype(np.float32)  # type: ignore[no-any-return]
