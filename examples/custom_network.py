"""A network written outside dispatchrl, trained by TD3 fused: an MLP with residual hidden blocks.

``ResidualMLP`` keeps the MLP's parameters (so parameter groups, Adam and Polyak averaging are
the MLP's methods, inherited through the class hierarchy) and adds methods of the network
functions where it differs: ``forward`` adds a skip connection around every hidden layer whose
input and output widths match (h ← h + relu(h W + b)), ``backward`` adds the skip's gradient,
``make_buffers`` keeps the block outputs, and ``deployable`` gives the policy. The skip is one
small ``@njit`` kernel launched like dispatchrl's own, so TD3's step is still one compiled loop.

    python examples/custom_network.py [--steps 10000] [--seed 0]
"""

import argparse
from dataclasses import dataclass

from numba import njit

import dispatchrl as drl
from dispatchrl import nn

__all__ = ["ResidualBuffers", "ResidualMLP", "main", "residual_mlp"]


@dataclass
class ResidualMLP(nn.MLP):
    """An MLP whose hidden layers of equal width are residual blocks."""

    def residual(self, layer: int) -> bool:
        return 0 < layer < len(self.weights) - 1 and self.sizes[layer] == self.sizes[layer + 1]


@dataclass
class ResidualBuffers(nn.MLPBuffers):
    skip: list = None  # per layer: the block output h + f(h) (None where the layer has no skip)


def residual_mlp(device, sizes, activation="relu", output_activation="identity", seed=0, trainable=True):
    """The constructor TD3 calls (Config.network): the MLP's parameters and initialisation."""
    net = nn.mlp(device, sizes, activation, output_activation, seed=seed, trainable=trainable)
    return ResidualMLP(**{f: getattr(net, f) for f in net.__dataclass_fields__})


@njit(cache=True, fastmath=True)
def add_into(a, b, out):
    """out = a + b (out may be a)."""
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            out[i, j] = a[i, j] + b[i, j]


@nn.make_buffers.dispatch
def make_buffers(device: drl.Generic, net: ResidualMLP, batch, input_gradient) -> ResidualBuffers:
    base = nn.mlp_buffers(device, net, batch, input_gradient)
    skip = [drl.zeros(device, (batch, net.sizes[i + 1])) if net.residual(i) else None for i in range(len(net.weights))]
    return ResidualBuffers(**{f: getattr(base, f) for f in base.__dataclass_fields__ if f != "skip"}, skip=skip)


def _layer_input(net, buffers, x, layer):
    if layer == 0:
        return x
    return buffers.skip[layer - 1] if net.residual(layer - 1) else buffers.out[layer - 1]


@nn.forward.dispatch
def forward(device: drl.Generic, net: ResidualMLP, buffers: ResidualBuffers, x) -> None:
    for i, (w, b) in enumerate(zip(net.weights, net.biases)):
        inp = _layer_input(net, buffers, x, i)
        drl.dense_forward(device, inp, w.value, b.value, buffers.pre[i], buffers.out[i], net.activation_of(i))
        if net.residual(i):
            drl.launch(device, add_into, buffers.out[i], inp, buffers.skip[i])


@nn.backward.dispatch
def backward(
    device: drl.Generic, net: ResidualMLP, buffers: ResidualBuffers, x, d_output, parameters, input_gradient
) -> None:
    d_out = d_output
    for i in reversed(range(len(net.weights))):
        w, b = net.weights[i], net.biases[i]
        d_x = None if i == 0 and (input_gradient is False or buffers.d_in[0] is None) else buffers.d_in[i]
        if parameters:
            drl.dense_backward(
                device,
                _layer_input(net, buffers, x, i),
                w.value,
                buffers.pre[i],
                buffers.out[i],
                d_out,
                buffers.d_pre[i],
                w.grad,
                b.grad,
                d_x,
                net.activation_of(i),
            )
        elif d_x is not None:
            drl.dense_input_gradient(
                device, w.value, buffers.pre[i], buffers.out[i], d_out, buffers.d_pre[i], d_x, net.activation_of(i)
            )
        if net.residual(i):
            drl.launch(device, add_into, d_x, d_out, d_x)  # the skip passes d_out through unchanged
        d_out = d_x


@nn.deployable.dispatch
def deployable(net: ResidualMLP, action_low, action_high, squash):
    return nn.NetworkPolicy(net, action_low, action_high, squash)  # forward() on the host, eagerly


# Config(network="residual_mlp") makes the actor and the critics residual; actor_network= or
# critic_network= makes only that one residual (they win over network). "custom_network:residual_mlp" also works.
nn.NETWORKS["residual_mlp"] = residual_mlp


def main(steps: int = 10_000, seed: int = 0) -> float:
    config = drl.td3.Config(total_steps=steps, network="residual_mlp")
    result = drl.td3.train(drl.CPU(), "pendulum", config, seed=seed, progress=False)
    mean, _ = drl.training.evaluate(result.policy, result.spec.eval_id)
    print(
        f"trained TD3 with a residual MLP on Pendulum for {result.steps} steps in {result.train_seconds:.2f} s; "
        f"evaluation return {mean:.1f}"
    )
    return mean


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    main(args.steps, args.seed)
