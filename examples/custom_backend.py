"""Add a backend by adding methods: no subclassing of algorithms, no edits to dispatchrl.

`Counting` is a new device. It inherits every CPU method through the class hierarchy and
overrides one generic function, `dense_forward`, with its own kernel (numpy, counting calls and
multiply-adds). The MLP training step, written once in dispatchrl.nn, then runs on it unchanged,
eagerly and fused: the fused step interleaves the Python kernel with compiled CPU segments.
"""

import numpy as np

import dispatchrl as drl
from dispatchrl import nn


class Counting(drl.CPU):
    """CPU device whose dense layers are counted."""


counts = {"dense_forward": 0, "multiply_adds": 0}
ACTIVATE = {drl.Activation.IDENTITY: lambda x: x, drl.Activation.RELU: lambda x: np.maximum(x, 0),
            drl.Activation.TANH: np.tanh}


def counting_dense_forward(x, W, b, pre, out, activation):
    counts["dense_forward"] += 1
    counts["multiply_adds"] += x.shape[0] * W.shape[0] * W.shape[1]
    np.matmul(x, W, out=pre)
    pre += b
    out[...] = ACTIVATE[activation](pre)


@drl.dense_forward.dispatch
def dense_forward(device: Counting, x, W, b, pre, out, activation):
    # `activation` arrives as a drl.Activation member, whether the caller named it or passed one
    drl.launch(device, counting_dense_forward, x, W, b, pre, out, activation)


def train(device, steps=20):
    g = np.random.default_rng(0)
    x = g.normal(size=(32, 4)).astype(np.float32)
    y = np.sin(x.sum(axis=1, keepdims=True)).astype(np.float32)
    net = nn.mlp(device, (4, 32, 32, 1), activation="tanh", seed=0)
    buffers = nn.mlp_buffers(device, net, batch=32)
    loss = drl.zeros(device, 1)
    step = drl.fuse(device, nn.mlp_train_step, net, buffers, drl.asarray(device, x),
                    drl.asarray(device, y), loss)
    step(steps)
    return drl.to_numpy(loss)[0], drl.to_numpy(net.weights[0].value)


if __name__ == "__main__":
    loss_counting, w_counting = train(Counting())
    loss_cpu, w_cpu = train(drl.CPU())
    print(f"Counting device: loss {loss_counting:.6f}, {counts['dense_forward']} dense_forward calls, "
          f"{counts['multiply_adds']} multiply-adds")
    print(f"CPU device:      loss {loss_cpu:.6f}")
    assert counts["dense_forward"] == 20 * 3, counts
    np.testing.assert_allclose(w_counting, w_cpu, rtol=1e-4, atol=1e-5)
    print("same weights on both devices")
