"""Multi-layer perceptrons as plain structs of Arrays plus functions over them (RLtools style).

Parameters (value, gradient, Adam moments, step counter) live in :class:`MLP`; activations and
their gradients for one static batch size live in :class:`MLPBuffers`, so one network can be
evaluated at several batch sizes (acting vs training) without reallocation.
"""

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..activation import ACTIVATIONS
from ..arrays import Array, view, zeros
from ..errors import ConfigError, ShapeError
from ..functions import DispatchedFunction
from ..kernels.core.api import dense_backward, dense_forward, dense_input_gradient
from ..kernels.random.api import random_uniform, rng

__all__ = [
    "FLAT_MULTIPLE",
    "MLP",
    "MLPBuffers",
    "Parameter",
    "layer_calls",
    "mlp",
    "mlp_backward",
    "mlp_buffers",
    "mlp_forward",
    "parameter",
]


@dataclass
class Parameter:
    """A tensor and what training it needs; all but ``value`` are None when it is not trained."""

    value: Array
    grad: Array | None  # same shape and dtype as value
    m: Array | None  # Adam first moment
    v: Array | None  # Adam second moment
    t: Array | None  # Adam step counter, int64 (1,)


def parameter(device: Any, shape: Any, dtype: Any = np.float32, trainable: bool = True) -> Parameter:
    """A parameter with its gradient and Adam state; ``trainable=False`` keeps the value only
    (target networks, moved by Polyak averaging, never by gradients)."""
    if not trainable:
        return Parameter(value=zeros(device, shape, dtype), grad=None, m=None, v=None, t=None)
    return Parameter(
        value=zeros(device, shape, dtype),
        grad=zeros(device, shape, dtype),
        m=zeros(device, shape, dtype),
        v=zeros(device, shape, dtype),
        t=zeros(device, 1, np.int64),
    )


@dataclass
class MLP:
    sizes: tuple[int, ...]
    activation: str
    output_activation: str
    weights: list[Parameter]  # (in, out) per layer
    biases: list[Parameter]  # (out,) per layer
    # What Adam and Polyak averaging update, one kernel each: a flat Parameter that most of the
    # layers' tensors are views of (one shared Adam step counter), then the rest on their own
    # (see FLAT_MULTIPLE). Fewer calls on CPU, fewer launches on CUDA. Checkpoints keep the
    # per-layer tensors only.
    groups: list[Parameter] | None = field(default=None, metadata={"checkpoint": False})

    def activation_of(self, layer: int) -> str:
        return self.output_activation if layer == len(self.weights) - 1 else self.activation

    def parameters(self) -> list[Parameter]:
        return [p for pair in zip(self.weights, self.biases) for p in pair]


@dataclass
class MLPBuffers:
    batch: int
    pre: list[Array]  # pre-activations per layer (the out array itself where none is kept)
    out: list[Array]  # outputs per layer; out[-1] is the network output
    d_pre: list[Array]  # gradient w.r.t. pre-activations
    d_in: list[Array | None]  # gradient w.r.t. each layer's input (None for layer 0 unless asked for)
    d_output: Array  # gradient w.r.t. the network output, filled by a loss gradient

    @property
    def output(self) -> Array:
        return self.out[-1]


#: Tensors whose size is a multiple of this share the flat buffer. Adam's vector loop takes 64
#: float32 per iteration (16 AVX-512 lanes, unrolled 4×), so such a tensor is updated entirely in
#: vector lanes whether alone or flat, and flat storage changes no bits. The others (output
#: biases, odd widths) keep their own storage: their tails run in the scalar remainder loop,
#: whose fastmath division rounds differently in rare cases, and every trajectory would change.
FLAT_MULTIPLE = 64


def mlp(
    device: Any,
    sizes: Any,
    activation: str = "relu",
    output_activation: str = "identity",
    dtype: Any = np.float32,
    seed: int = 0,
    trainable: bool = True,
) -> MLP:
    """An MLP with layer widths ``sizes`` (input first), initialised like PyTorch's Linear:
    U(±1/√fan_in) for weights and biases, drawn from the counter RNG so every device agrees."""
    sizes = tuple(int(s) for s in sizes)
    if len(sizes) < 2 or min(sizes) < 1:
        raise ConfigError(f"mlp: 'sizes' needs at least two positive widths, got {sizes}")
    for name, act in (("activation", activation), ("output_activation", output_activation)):
        if act not in ACTIVATIONS:
            raise ConfigError(f"mlp: '{name}' must be one of {sorted(ACTIVATIONS)}, got {act!r}")
    shapes = [shape for n_in, n_out in itertools.pairwise(sizes) for shape in ((n_in, n_out), (n_out,))]
    in_flat = [int(np.prod(shape)) % FLAT_MULTIPLE == 0 for shape in shapes]
    # members are whole multiples of 64 elements, so every view starts on a cache line
    offsets = np.cumsum([0] + [int(np.prod(shape)) if member else 0 for shape, member in zip(shapes, in_flat)])
    flat = parameter(device, (int(offsets[-1]),), dtype, trainable) if any(in_flat) else None

    def layer(shape: tuple[int, ...], offset: int, member: bool) -> Parameter:
        if not member:
            return parameter(device, shape, dtype, trainable)
        assert flat is not None  # a member exists only where the flat parameter does

        def part(a: Array | None) -> Array | None:
            return None if a is None else view(a, int(offset), shape)

        return Parameter(
            value=view(flat.value, int(offset), shape), grad=part(flat.grad), m=part(flat.m), v=part(flat.v), t=flat.t
        )

    params = [layer(*args) for args in zip(shapes, offsets, in_flat)]
    weights, biases = params[0::2], params[1::2]
    groups = ([flat] if flat else []) + [p for p, member in zip(params, in_flat) if not member]
    stream = rng(device, seed)
    for w, b in zip(weights, biases):
        bound = 1.0 / np.sqrt(w.value.shape[0])
        random_uniform(device, stream, w.value, -bound, bound)
        random_uniform(device, stream, b.value, -bound, bound)
    return MLP(
        sizes=sizes,
        activation=activation,
        output_activation=output_activation,
        weights=weights,
        biases=biases,
        groups=groups,
    )


def mlp_buffers(device: Any, net: MLP, batch: int, input_gradient: bool = False) -> MLPBuffers:
    """Buffers for evaluating ``net`` on ``batch`` rows; ``input_gradient`` also keeps the
    gradient w.r.t. the network input (needed to backpropagate through a critic into an actor)."""
    dtype = net.weights[0].value.dtype
    widths = net.sizes[1:]
    d_in: list[Array | None] = [zeros(device, (batch, net.sizes[0]), dtype) if input_gradient else None]
    d_in += [zeros(device, (batch, w), dtype) for w in widths[:-1]]
    out = [zeros(device, (batch, w), dtype) for w in widths]
    # Only GELU's derivative needs the pre-activation (ReLU's sign and tanh's value survive the
    # activation), so other layers activate in place: pre is out, one memory stream less.
    pre = [zeros(device, (batch, w), dtype) if net.activation_of(i) == "gelu" else out[i] for i, w in enumerate(widths)]
    return MLPBuffers(
        batch=batch,
        pre=pre,
        out=out,
        d_pre=[zeros(device, (batch, w), dtype) for w in widths],
        d_in=d_in,
        d_output=zeros(device, (batch, widths[-1]), dtype),
    )


def mlp_forward(device: Any, net: MLP, buffers: MLPBuffers, x: Array) -> None:
    if x.shape != (buffers.batch, net.sizes[0]):
        raise ShapeError(f"mlp_forward: argument 'x' has shape {x.shape}, expected ({buffers.batch}, {net.sizes[0]})")
    inp = x
    for i, (w, b) in enumerate(zip(net.weights, net.biases)):
        dense_forward(device, inp, w.value, b.value, buffers.pre[i], buffers.out[i], net.activation_of(i))
        inp = buffers.out[i]


def mlp_backward(
    device: Any,
    net: MLP,
    buffers: MLPBuffers,
    x: Array,
    d_output: Array,
    parameters: bool = True,
    input_gradient: bool | None = None,
) -> None:
    """Backpropagate ``d_output`` (gradient w.r.t. the output) into every parameter's ``grad``
    and, if the buffers keep one (``input_gradient=True``) and ``input_gradient`` is not False,
    into ``buffers.d_in[0]``, the gradient w.r.t. the input. ``parameters=False`` computes only
    that input gradient, skipping the weight gradients."""
    if (not parameters or input_gradient) and buffers.d_in[0] is None:
        raise ConfigError("mlp_backward: an input gradient needs buffers made with input_gradient=True")
    layers_backward(device, net, buffers, x, d_output, parameters, input_gradient)


def _layers_backward(device, net, buffers, x, d_output, parameters, input_gradient) -> None:
    """mlp_backward's layer loop, after its checks; a backend may add a method for its device type
    (the CPU's fuses each ReLU's derivative into the layer above: :mod:`.cpu`). Every method must
    stand for :func:`layer_calls`: the same bits, and the same calls' checks."""


layers_backward = DispatchedFunction(_layers_backward, name="layers_backward")


@layers_backward.dispatch
def _(device: object, net, buffers, x, d_output, parameters, input_gradient) -> None:
    layer_calls(device, net, buffers, x, d_output, parameters, input_gradient)


def layer_calls(
    device: Any, net: MLP, buffers: MLPBuffers, x: Array, d_output: Array, parameters: bool, input_gradient: bool | None
) -> None:
    """mlp_backward's layer loop as one generic-function call per layer (``dense_backward``, or
    ``dense_input_gradient`` without parameter gradients), so each layer runs ``device``'s method."""
    d_out: Array | None = d_output  # then each layer's input gradient (None below layer 0)
    for i in reversed(range(len(net.weights))):
        if parameters:
            inp = x if i == 0 else buffers.out[i - 1]
            d_x = None if i == 0 and input_gradient is False else buffers.d_in[i]
            dense_backward(
                device,
                inp,
                net.weights[i].value,
                buffers.pre[i],
                buffers.out[i],
                d_out,
                buffers.d_pre[i],
                net.weights[i].grad,
                net.biases[i].grad,
                d_x,
                net.activation_of(i),
            )
        else:
            dense_input_gradient(
                device,
                net.weights[i].value,
                buffers.pre[i],
                buffers.out[i],
                d_out,
                buffers.d_pre[i],
                buffers.d_in[i],
                net.activation_of(i),
            )
        d_out = buffers.d_in[i]
