"""The CPU method of an MLP's backward (:func:`.mlp.layers_backward`; the generic one is in
:mod:`.mlp`).

An MLP's backward on the CPU applies each hidden ReLU's derivative in the stores of the input
gradient product of the layer above it (the tiles' epilogue), and that ReLU layer then only sums
its bias gradient: one 100×64 pass less per layer boundary, and such passes run from L2 (issue
20, NOTES.md). The same bits as :func:`.mlp.layer_calls`; the gradient w.r.t. a hidden ReLU
layer's output then lands in ``buffers.d_pre`` of that layer, not in ``buffers.d_in``.

The fused chain stands for the CPU's own ``dense_backward`` / ``dense_input_gradient`` methods,
so it runs only where they are the ones a call would run: a device derived from CPU that
overrides either gets :func:`.mlp.layer_calls`, one call of its method per layer. Either way each
layer's call is checked as the unfused call would be (declaration and memory overlap) first.
"""

from typing import Any

from ..devices import CPU
from ..dispatch import check_aliasing
from ..kernels.core import api
from ..kernels.core.cpu import dense_backward_fused, dense_input_gradient_fused, relu_fusable
from .mlp import layer_calls, layers_backward

__all__: list[str] = []

#: the device whose methods the fused chain stands for, to compare a subclass's resolution with
_CPU = CPU()


def _runs_cpu_method(fn: Any, args: tuple) -> bool:
    """Whether ``fn(*args)`` (checked arguments, a CPU-derived device first) runs the CPU's method."""
    if type(args[0]) is CPU:
        return True
    return fn.function.resolve_method(args)[0] is fn.function.resolve_method((_CPU, *args[1:]))[0]


@layers_backward.dispatch
def _(device: CPU, net, buffers, x, d_output, parameters, input_gradient) -> None:
    # the unfused calls (layer_calls'), checked first: shapes, dtypes, devices and memory overlap
    fn = api.dense_backward if parameters else api.dense_input_gradient
    activations, own_methods = [], True
    d_out = d_output
    for i in reversed(range(len(net.weights))):
        w, pre, out, act_name = net.weights[i].value, buffers.pre[i], buffers.out[i], net.activation_of(i)
        if parameters:
            inp = x if i == 0 else buffers.out[i - 1]
            d_x = None if i == 0 and input_gradient is False else buffers.d_in[i]
            dW, db = net.weights[i].grad, net.biases[i].grad
            args = fn.declaration(device, inp, w, pre, out, d_out, buffers.d_pre[i], dW, db, d_x, act_name)
        else:
            d_x = buffers.d_in[i]
            args = fn.declaration(device, w, pre, out, d_out, buffers.d_pre[i], d_x, act_name)
        check_aliasing(fn, args)
        own_methods = own_methods and _runs_cpu_method(fn, args)
        activations.append(args[-1])
        d_out = d_x
    if not own_methods:
        layer_calls(device, net, buffers, x, d_output, parameters, input_gradient)
        return
    d_out = d_output
    gradient_in = False  # d_out already is ∂/∂pre of this layer (the layer above applied its ReLU's)
    for i, act in zip(reversed(range(len(net.weights))), activations):
        inp = x if i == 0 else buffers.out[i - 1]
        w, pre, out = net.weights[i].value, buffers.pre[i], buffers.out[i]
        relu_below = i > 0 and net.activation_of(i - 1) == "relu" and relu_fusable(inp, w)
        d_x = buffers.d_pre[i - 1] if relu_below else buffers.d_in[i]
        d_pre = d_out if gradient_in else buffers.d_pre[i]
        if parameters:
            d_x = None if i == 0 and input_gradient is False else d_x
            dW, db = net.weights[i].grad, net.biases[i].grad
            dense_backward_fused(device, inp, w, pre, out, d_out, d_pre, dW, db, d_x, act, gradient_in, relu_below)
        else:
            mask = inp if relu_below else None
            dense_input_gradient_fused(device, w, pre, out, d_out, d_pre, d_x, act, gradient_in, mask)
        d_out, gradient_in = d_x, relu_below
