"""The CPU method of an MLP's backward (:func:`.mlp.layers_backward`; the generic one is in
:mod:`.mlp`).

An MLP's backward on the CPU applies each hidden ReLU's derivative in the stores of the input
gradient product of the layer above it (the tiles' epilogue), and that ReLU layer then only sums
its bias gradient: one 100×64 pass less per layer boundary, and such passes run from L2 (issue
20, NOTES.md). The same bits as :func:`.mlp.mlp_backward`; the gradient w.r.t. a hidden ReLU
layer's output then lands in ``buffers.d_pre`` of that layer, not in ``buffers.d_in``.
"""

from typing import Any

from ..devices import CPU
from ..kernels.core import api
from ..kernels.core.cpu import dense_backward_fused, dense_input_gradient_fused, relu_fusable
from .mlp import layers_backward

__all__: list[str] = []


@layers_backward.dispatch
def _(device: CPU, net, buffers, x, d_output, parameters, input_gradient) -> None:
    d_out: Any = d_output
    gradient_in = False  # d_out already is ∂/∂pre of this layer (the layer above applied its ReLU's)
    for i in reversed(range(len(net.weights))):
        inp = x if i == 0 else buffers.out[i - 1]
        w, pre, out, act_name = net.weights[i].value, buffers.pre[i], buffers.out[i], net.activation_of(i)
        relu_below = i > 0 and net.activation_of(i - 1) == "relu" and relu_fusable(inp, w)
        d_x = buffers.d_pre[i - 1] if relu_below else buffers.d_in[i]
        d_pre = d_out if gradient_in else buffers.d_pre[i]
        if parameters:
            d_x = None if i == 0 and input_gradient is False else d_x
            dW, db = net.weights[i].grad, net.biases[i].grad
            # the unfused call's checks (shapes, dtypes, device) before anything is staged; its activation
            act = api.dense_backward.declaration(device, inp, w, pre, out, d_out, d_pre, dW, db, d_x, act_name)[-1]
            dense_backward_fused(device, inp, w, pre, out, d_out, d_pre, dW, db, d_x, act, gradient_in, relu_below)
        else:
            act = api.dense_input_gradient.declaration(device, w, pre, out, d_out, d_pre, d_x, act_name)[-1]
            mask = inp if relu_below else None
            dense_input_gradient_fused(device, w, pre, out, d_out, d_pre, d_x, act, gradient_in, mask)
        d_out, gradient_in = d_x, relu_below
