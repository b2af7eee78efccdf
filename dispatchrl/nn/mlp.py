"""Multi-layer perceptrons as plain structs of Arrays plus functions over them (RLtools style).

Parameters (value, gradient, Adam moments, step counter) live in :class:`MLP`; activations and
their gradients for one static batch size live in :class:`MLPBuffers`, so one network can be
evaluated at several batch sizes (acting vs training) without reallocation.
"""

import itertools
from dataclasses import dataclass, field

import numpy as np

from ..activation import ACTIVATIONS
from ..arrays import view, zeros
from ..errors import ConfigError, ShapeError
from ..kernels.core.api import (
    adam_step,
    dense_backward,
    dense_forward,
    dense_input_gradient,
    mse_gradient,
    mse_loss,
    polyak_update,
)
from ..kernels.random.api import random_uniform, rng


@dataclass
class Parameter:
    value: object
    grad: object
    m: object  # Adam first moment
    v: object  # Adam second moment
    t: object  # Adam step counter, int64 (1,)


def parameter(device, shape, dtype=np.float32, trainable=True):
    """A parameter with its gradient and Adam state; ``trainable=False`` keeps the value only
    (target networks, moved by Polyak averaging, never by gradients)."""
    if not trainable:
        return Parameter(zeros(device, shape, dtype), None, None, None, None)
    return Parameter(*(zeros(device, shape, dtype) for _ in range(4)), zeros(device, 1, np.int64))


@dataclass
class MLP:
    sizes: tuple
    activation: str
    output_activation: str
    weights: list  # Parameter (in, out) per layer
    biases: list  # Parameter (out,) per layer
    # What Adam and Polyak averaging update, one kernel each: a flat Parameter that most of the
    # layers' tensors are views of (one shared Adam step counter), then the rest on their own
    # (see FLAT_MULTIPLE). Fewer calls on CPU, fewer launches on CUDA. Checkpoints keep the
    # per-layer tensors only.
    groups: list | None = field(default=None, metadata={"checkpoint": False})

    def activation_of(self, layer):
        return self.output_activation if layer == len(self.weights) - 1 else self.activation

    def parameters(self):
        return [p for pair in zip(self.weights, self.biases) for p in pair]


@dataclass
class MLPBuffers:
    batch: int
    pre: list  # pre-activations per layer
    out: list  # outputs per layer; out[-1] is the network output
    d_pre: list  # gradient w.r.t. pre-activations
    d_in: list  # gradient w.r.t. each layer's input (None for layer 0 unless asked for)
    d_output: object  # gradient w.r.t. the network output, filled by a loss gradient

    @property
    def output(self):
        return self.out[-1]


#: Tensors whose size is a multiple of this share the flat buffer. Adam's vector loop takes 64
#: float32 per iteration (16 AVX-512 lanes, unrolled 4×), so such a tensor is updated entirely in
#: vector lanes whether alone or flat, and flat storage changes no bits. The others (output
#: biases, odd widths) keep their own storage: their tails run in the scalar remainder loop,
#: whose fastmath division rounds differently in rare cases, and every trajectory would change.
FLAT_MULTIPLE = 64


def mlp(device, sizes, activation="relu", output_activation="identity", dtype=np.float32, seed=0, trainable=True):
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

    def layer(shape, offset, member):
        if not member:
            return parameter(device, shape, dtype, trainable)
        arrays = (None if a is None else view(a, int(offset), shape) for a in (flat.value, flat.grad, flat.m, flat.v))
        return Parameter(*arrays, flat.t)

    params = [layer(*args) for args in zip(shapes, offsets, in_flat)]
    weights, biases = params[0::2], params[1::2]
    groups = ([flat] if flat else []) + [p for p, member in zip(params, in_flat) if not member]
    stream = rng(device, seed)
    for w, b in zip(weights, biases):
        bound = 1.0 / np.sqrt(w.value.shape[0])
        random_uniform(device, stream, w.value, -bound, bound)
        random_uniform(device, stream, b.value, -bound, bound)
    return MLP(sizes, activation, output_activation, weights, biases, groups)


def mlp_buffers(device, net, batch, input_gradient=False):
    """Buffers for evaluating ``net`` on ``batch`` rows; ``input_gradient`` also keeps the
    gradient w.r.t. the network input (needed to backpropagate through a critic into an actor)."""
    dtype = net.weights[0].value.dtype
    widths = net.sizes[1:]
    d_in = [zeros(device, (batch, net.sizes[0]), dtype) if input_gradient else None]
    d_in += [zeros(device, (batch, w), dtype) for w in widths[:-1]]
    out = [zeros(device, (batch, w), dtype) for w in widths]
    # Only GELU's derivative needs the pre-activation (ReLU's sign and tanh's value survive the
    # activation), so other layers activate in place: pre is out, one memory stream less.
    pre = [zeros(device, (batch, w), dtype) if net.activation_of(i) == "gelu" else out[i] for i, w in enumerate(widths)]
    return MLPBuffers(
        batch,
        pre,
        out,
        [zeros(device, (batch, w), dtype) for w in widths],
        d_in,
        zeros(device, (batch, widths[-1]), dtype),
    )


def mlp_forward(device, net, buffers, x):
    if x.shape != (buffers.batch, net.sizes[0]):
        raise ShapeError(f"mlp_forward: argument 'x' has shape {x.shape}, expected ({buffers.batch}, {net.sizes[0]})")
    inp = x
    for i, (w, b) in enumerate(zip(net.weights, net.biases)):
        dense_forward(device, inp, w.value, b.value, buffers.pre[i], buffers.out[i], net.activation_of(i))
        inp = buffers.out[i]


def mlp_backward(device, net, buffers, x, d_output, parameters=True, input_gradient=None):
    """Backpropagate ``d_output`` (gradient w.r.t. the output) into every parameter's ``grad``
    and, if the buffers keep one (``input_gradient=True``) and ``input_gradient`` is not False,
    into ``buffers.d_in[0]``, the gradient w.r.t. the input. ``parameters=False`` computes only
    that input gradient, skipping the weight gradients."""
    if (not parameters or input_gradient) and buffers.d_in[0] is None:
        raise ConfigError("mlp_backward: an input gradient needs buffers made with input_gradient=True")
    d_out = d_output
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


def adam_update(device, net, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8):
    """One Adam step on every parameter of ``net`` (one kernel per group, see MLP.groups)."""
    for p in net.groups:
        adam_step(device, p.value, p.grad, p.m, p.v, p.t, lr, beta1, beta2, eps)


def polyak_average(device, target, online, polyak):
    """target ← polyak·target + (1 − polyak)·online for every parameter (one kernel per group)."""
    for p_target, p_online in zip(target.groups, online.groups):
        polyak_update(device, p_target.value, p_online.value, polyak)


def mlp_train_step(device, net, buffers, x, y, loss, lr=1e-3):
    """One supervised step: forward, MSE loss, backward, Adam. Written once; :func:`dispatchrl.fuse`
    compiles it per device."""
    mlp_forward(device, net, buffers, x)
    mse_loss(device, buffers.output, y, loss)
    mse_gradient(device, buffers.output, y, buffers.d_output)
    mlp_backward(device, net, buffers, x, buffers.d_output)
    adam_update(device, net, lr)
