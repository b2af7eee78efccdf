"""Add a backend by adding methods: no subclassing of algorithms, no edits to dispatchrl.

Two devices:

- ``Counting(drl.CPU)`` overrides one generic function, ``dense_forward``: it counts the call with
  CPU's own ``increment`` kernel on a counter array and then delegates to its parent's method,
  ``drl.dense_forward(drl.CPU(), ...)`` (arrays of one memory space are accepted by every device
  of that space). Both are Numba kernels, so the MLP training step, written once in
  dispatchrl.nn, still fuses into one compiled loop, and the counter counts at run time.
- ``Tiny(drl.Device)`` starts from nothing: it registers just the methods the step below needs,
  numpy kernels, plus ``compile_step``, the hook that turns a traced step into a program.

    python examples/custom_backend.py
"""

import numpy as np

import dispatchrl as drl
from dispatchrl import nn

__all__ = ["CALLS", "Counting", "Tiny", "tiny_step", "train_mlp"]


class Counting(drl.CPU):
    """CPU device whose dense layers are counted."""


#: dense_forward calls made on Counting devices (host memory: every host device may write it)
CALLS = drl.zeros(drl.CPU(), 1, np.int64)


@drl.dense_forward.dispatch
def dense_forward(device: Counting, x, W, b, pre, out, activation):
    drl.increment(drl.CPU(), CALLS)  # a CPU kernel: fuses
    drl.dense_forward(drl.CPU(), x, W, b, pre, out, activation)  # the parent's method
    # the same without making the parent device: drl.invoke(drl.dense_forward, drl.CPU)(device, ...)


def train_mlp(device, steps=20):
    """Fit a small MLP for ``steps`` fused steps on ``device``; returns (loss, first weights, step)."""
    g = np.random.default_rng(0)
    x = g.normal(size=(32, 4)).astype(np.float32)
    y = np.sin(x.sum(axis=1, keepdims=True)).astype(np.float32)
    net = nn.mlp(device, (4, 32, 32, 1), activation="tanh", seed=0)
    buffers = nn.mlp_buffers(device, net, batch=32)
    loss = drl.zeros(device, 1)
    step = drl.fuse(device, nn.mlp_train_step, net, buffers, drl.asarray(device, x), drl.asarray(device, y), loss)
    step(steps)
    return drl.to_numpy(loss)[0], drl.to_numpy(net.weights[0].value), step


class Tiny(drl.Device):
    """A device of its own (host memory, numpy kernels): only the methods registered below."""


def _relu_kernel(x, out):
    np.maximum(x, 0, out=out)


def _matmul_kernel(a, b, out):
    np.matmul(a, b, out=out)


@drl.relu.dispatch
def relu(device: Tiny, x, out):
    drl.launch(device, _relu_kernel, x, out)


@drl.matmul.dispatch
def matmul(device: Tiny, a, b, out):
    drl.launch(device, _matmul_kernel, a, b, out)


@drl.compile_step.dispatch
def compile_step(device: Tiny, calls: list) -> drl.staging.Program:
    # without this method drl.fuse(Tiny(), ...) raises a DeviceError saying to add it
    return drl.staging.python_program(calls)


def tiny_step(device, x, w, hidden, out):
    drl.matmul(device, x, w, hidden)
    drl.relu(device, hidden, out)


if __name__ == "__main__":
    loss_counting, w_counting, step = train_mlp(Counting())
    loss_cpu, w_cpu, _ = train_mlp(drl.CPU())
    print(
        f"Counting device: loss {loss_counting:.6f}, {drl.to_numpy(CALLS)[0]} dense_forward calls, "
        f"{len(step.kernel_calls)} kernels in one compiled loop: {not hasattr(step._run, 'segments')}"
    )
    print(f"CPU device:      loss {loss_cpu:.6f}")
    assert drl.to_numpy(CALLS)[0] == 20 * 3, CALLS
    np.testing.assert_array_equal(w_counting, w_cpu)
    print("same weights on both devices")

    tiny = Tiny()
    x = drl.asarray(tiny, [[1.0, -2.0], [3.0, 4.0]], np.float32)
    w = drl.asarray(tiny, [[1.0, 0.0], [0.0, -1.0]], np.float32)
    hidden, out = drl.zeros(tiny, (2, 2)), drl.zeros(tiny, (2, 2))
    drl.fuse(tiny, tiny_step, x, w, hidden, out)(1)
    print("Tiny device: relu(x @ w) =", drl.to_numpy(out).tolist())
    assert drl.to_numpy(out).tolist() == [[1.0, 2.0], [3.0, 0.0]]
