"""CPU methods of the core generic functions: Numba kernels, BLAS (``np.dot(..., out)``) or the
register-tiled kernels of :mod:`.cpu_gemm` (AVX2 cores, see :func:`tiled_gemm`) for matrix
products.

Kernels are module-level ``@njit`` functions with the option sets of
:mod:`dispatchrl.backends.cpu`, so fused steps can import them and call their compiled code.
Helpers live in this same file so Numba's per-file cache check covers them.
"""

import math
import os

import numpy as np
from numba import njit, types
from numba.extending import overload

from ...activation import Activation
from ...arrays import Array, zeros
from ...backends.cpu import (
    JIT_EXACT,
    JIT_EXACT_INNER,
    JIT_FAST,
    JIT_FAST_INNER,
    before_first_run,
    blas_core_types,
    per_index,
    vector_fma_widths,
)
from ...devices import CPU
from ...errors import ConfigError
from ...staging import launch
from . import api
from .api import INV_SQRT_2PI, SQRT_HALF
from .cpu_gemm import (
    column_sums,
    load_drivers,
    matmul_bias_tiled,
    matmul_mask_tiled,
    matmul_tiled,
    relu_backward_column_sums,
    transpose_tiled,
)

__all__ = [
    "activation_kernel",
    "adam_step_kernel",
    "adam_step_lr_array_kernel",
    "argmax_at",
    "argmax_kernel",
    "clip_at",
    "clip_kernel",
    "dense_backward_fused",
    "dense_input_gradient_fused",
    "matmul_blas",
    "matmul_loop",
    "matmul_tiled_kernel",
    "relu_fusable",
    "row_argmax",
    "tanh",
    "tiled_gemm",
]


#: below this many multiply-adds a hand loop beats the BLAS call overhead
_BLAS_MIN_WORK = 2048


def tanh(x):
    """tanh; for float32 a rational approximation (Eigen's, a few ulp) that vectorises, where
    libm's tanh is a scalar call of ~17 ns (most of a tanh network's time)."""
    return math.tanh(x)


@overload(tanh, jit_options=dict(fastmath=True))
def _tanh_overload(x):
    if isinstance(x, types.Float) and x.bitwidth == 32:

        def fast(x):
            x = min(max(x, np.float32(-7.90531110763549805)), np.float32(7.90531110763549805))
            x2 = x * x
            p = x2 * np.float32(-2.76076847742355e-16) + np.float32(2.00018790482477e-13)
            p = x2 * p + np.float32(-8.60467152213735e-11)
            p = x2 * p + np.float32(5.12229709037114e-08)
            p = x2 * p + np.float32(1.48572235717979e-05)
            p = x2 * p + np.float32(6.37261928875436e-04)
            p = x2 * p + np.float32(4.89352455891786e-03)
            q = x2 * np.float32(1.19825839466702e-06) + np.float32(1.18534705686654e-04)
            q = x2 * q + np.float32(2.26843463243900e-03)
            q = x2 * q + np.float32(4.89352518554385e-03)
            return x * p / q

        return fast
    return lambda x: math.tanh(x)


@njit(**JIT_FAST_INNER)
def _activate(pre, out, code):
    flat_pre = pre.reshape(pre.size)
    flat_out = out.reshape(out.size)
    if code == Activation.RELU:
        for i in range(flat_pre.size):
            v = flat_pre[i]
            flat_out[i] = v if v > 0 else 0
    elif code == Activation.TANH:
        if flat_pre.ctypes.data == flat_out.ctypes.data:
            # in place: a loop over one array vectorises as the out-of-place one does; through two
            # names for it, the overlap check sends every element to the scalar loop, whose exact
            # division differs by an ulp from the vector loop's reciprocal (AVX-512 Intel targets)
            for i in range(flat_out.size):
                flat_out[i] = tanh(flat_out[i])
        else:
            for i in range(flat_pre.size):
                flat_out[i] = tanh(flat_pre[i])
    elif code == Activation.GELU:
        for i in range(flat_pre.size):
            v = flat_pre[i]
            flat_out[i] = 0.5 * v * (1.0 + math.erf(v * SQRT_HALF))
    else:
        for i in range(flat_pre.size):
            flat_out[i] = flat_pre[i]


@njit(**JIT_FAST)
def activation_kernel(x, out, code):
    _activate(x, out, code)


def _activation_method(activation):
    def method(device: CPU, x, out):
        launch(device, activation_kernel, x, out, int(activation))

    return method


api.register_activation_methods(_activation_method)


@njit(**JIT_FAST)
def matmul_blas(a, b, out):
    np.dot(a, b, out)


@njit(**JIT_FAST)
def matmul_loop(a, b, out):
    m, k = a.shape
    n = b.shape[1]
    for i in range(m):
        for j in range(n):
            out[i, j] = 0
        for p in range(k):
            aip = a[i, p]
            for j in range(n):
                out[i, j] += aip * b[p, j]


@njit(**JIT_FAST)
def matmul_tiled_kernel(a, b, out):
    matmul_tiled(a, b, out)


def _use_blas(m, k, n):
    # Static shapes decide the kernel once, when the call is staged.
    return m * k * n >= _BLAS_MIN_WORK


def tiled_gemm() -> bool:
    """Whether float32 products above the BLAS threshold use the register-tiled kernels of
    :mod:`.cpu_gemm` instead of BLAS: DISPATCHRL_GEMM=auto (the default: tiled where Numba's
    target has 8-wide FMAs, i.e. AVX2 + FMA: TD3 ~1.4× faster than with OpenBLAS on Zen 3 and on
    emulated AVX2, as fast on Zen 4's AVX-512 in 16-wide registers; issue 20, NOTES.md), tiled,
    or blas. The two give different bits (each a valid rounding). Read when a call is staged, so a
    fused step keeps the kernels it was built with. NUMBA_CPU_NAME / NUMBA_CPU_FEATURES decide it
    too: auto and the tiles' width follow the target Numba compiles for."""
    setting = os.environ.get("DISPATCHRL_GEMM", "auto")
    if setting not in ("auto", "tiled", "blas"):
        raise ConfigError(f"DISPATCHRL_GEMM must be auto, tiled or blas, got {setting!r}")
    if setting == "auto":
        return 8 in vector_fma_widths()
    return setting == "tiled"


def _product_kernel(dtype, m, k, n) -> str:
    """The kernel kind, "loop", "tiled" or "blas", for a product of these static shapes (decided
    when the call is staged)."""
    if not _use_blas(m, k, n):
        return "loop"
    if dtype == np.float32 and tiled_gemm():
        before_first_run(load_drivers)  # not on the first product of a timed loop
        return "tiled"
    return "blas"


@api.matmul.dispatch
def matmul(device: CPU, a, b, out):
    m, k = a.shape
    kind = _product_kernel(out.dtype, m, k, b.shape[1])
    launch(device, _MATMUL[kind], a, b, out)


_MATMUL = {"loop": matmul_loop, "tiled": matmul_tiled_kernel, "blas": matmul_blas}


@njit(**JIT_FAST_INNER)
def _add_bias(pre, b):
    m, n = pre.shape
    for i in range(m):
        for j in range(n):
            pre[i, j] += b[j]


@njit(**JIT_FAST)
def _bias_activate_inplace(out, b, code):
    """out = activation(out + b) on one buffer: no aliasing for the vectoriser to check."""
    m, n = out.shape
    # an output layer: one flat loop, not a loop per row (not tanh: vectorised, it gives other bits)
    if n == 1 and code != Activation.TANH and out.strides[0] == out.itemsize:
        flat, b0 = out.reshape(m), b[0]
        if code == Activation.RELU:
            for i in range(m):
                v = flat[i] + b0
                flat[i] = v if v > 0 else 0
        else:
            for i in range(m):
                flat[i] += b0
        return
    for i in range(m):
        if code == Activation.RELU:
            for j in range(n):
                v = out[i, j] + b[j]
                out[i, j] = v if v > 0 else 0
        elif code == Activation.TANH:
            for j in range(n):
                out[i, j] = tanh(out[i, j] + b[j])
        else:
            for j in range(n):
                out[i, j] += b[j]


@njit(**JIT_FAST)
def dense_forward_blas(x, W, b, pre, out, code):
    np.dot(x, W, pre)
    _add_bias(pre, b)
    _activate(pre, out, code)


@njit(**JIT_FAST)
def dense_forward_inplace_blas(x, W, b, out, code):
    np.dot(x, W, out)
    _bias_activate_inplace(out, b, code)


@njit(**JIT_FAST)
def dense_forward_tiled(x, W, b, pre, out, code):
    matmul_tiled(x, W, pre)
    _add_bias(pre, b)
    _activate(pre, out, code)


@njit(**JIT_FAST)
def dense_forward_inplace_tiled(x, W, b, out, code):
    # bias and ReLU in the tiles' stores where they fit: the output is written once, not three times
    if (code == Activation.RELU or code == Activation.IDENTITY) and matmul_bias_tiled(
        x, W, out, b, code == Activation.RELU
    ):
        return
    matmul_tiled(x, W, out)
    _bias_activate_inplace(out, b, code)


@njit(**JIT_FAST)
def dense_forward_loop(x, W, b, pre, out, code):
    matmul_loop(x, W, pre)
    _add_bias(pre, b)
    _activate(pre, out, code)


@njit(**JIT_FAST)
def dense_forward_inplace_loop(x, W, b, out, code):
    matmul_loop(x, W, out)
    _bias_activate_inplace(out, b, code)


_FORWARD = {"loop": dense_forward_loop, "tiled": dense_forward_tiled, "blas": dense_forward_blas}
_FORWARD_INPLACE = {
    "loop": dense_forward_inplace_loop,
    "tiled": dense_forward_inplace_tiled,
    "blas": dense_forward_inplace_blas,
}


@api.dense_forward.dispatch
def dense_forward(device: CPU, x, W, b, pre, out, activation):
    kind = _product_kernel(out.dtype, x.shape[0], *W.shape)
    code = int(activation)
    if pre.data is out.data and activation is not Activation.GELU:  # buffers that keep no pre-activation
        launch(device, _FORWARD_INPLACE[kind], x, W, b, out, code)
    else:
        launch(device, _FORWARD[kind], x, W, b, pre, out, code)


@njit(**JIT_FAST_INNER)
def _activation_backward(pre, out, d_out, d_pre, db, code):
    """d_pre = d_out * activation'(pre), then db = column sums of d_pre: two flat passes
    vectorise better than one pass with a column accumulator, except where ReLU's has explicit
    vector accumulators (one pass over L2-resident arrays, same bits)."""
    if code == Activation.RELU and relu_backward_column_sums(pre, d_out, d_pre, db):
        return
    if code == Activation.IDENTITY and d_pre.ctypes.data == d_out.ctypes.data and column_sums(d_pre, db):
        return  # d_out already is ∂/∂pre (dense_backward_fused): only the bias gradient is left
    _activation_backward_only(pre, out, d_out, d_pre, code)
    m, n = d_pre.shape
    if n == 1:  # an output layer: one plain sum (a row loop of one element costs per row)
        total = d_pre[0, 0] * 0
        flat = d_pre.reshape(m)
        for i in range(m):
            total += flat[i]
        db[0] = total
        return
    for j in range(n):
        db[j] = 0
    for i in range(m):
        for j in range(n):
            db[j] += d_pre[i, j]


@njit(**JIT_FAST)
def _input_gradient_loop(d_pre, W, d_x):
    m, n = d_pre.shape
    k = W.shape[0]
    for i in range(m):
        for p in range(k):
            acc = 0.0
            for j in range(n):
                acc += d_pre[i, j] * W[p, j]
            d_x[i, p] = acc


@njit(**JIT_FAST_INNER)
def _transpose(W, WT):
    """WT = Wᵀ in 8×8 blocks (a plain loop strides through W one element per cache line)."""
    k, n = W.shape
    kb, nb = k - k % 8, n - n % 8
    for jb in range(0, nb, 8):
        for pb in range(0, kb, 8):
            for j in range(8):
                for p in range(8):
                    WT[jb + j, pb + p] = W[pb + p, jb + j]
    for j in range(n):  # ragged edges
        for p in range(kb if j < nb else 0, k):
            WT[j, p] = W[p, j]


@njit(**JIT_FAST)
def _input_gradient_blas(d_pre, W, WT, d_x):
    """d_x = d_pre Wᵀ. For wide inputs as an untransposed GEMM on the transposed copy WT of W:
    OpenBLAS's NT sgemm is ~40% slower than NN at these sizes, the copy costs a fraction."""
    if WT.shape != W.shape[::-1]:  # narrow inputs: NT directly (see _transpose_scratch)
        np.dot(d_pre, W.T, d_x)
        return
    _transpose(W, WT)
    np.dot(d_pre, WT, d_x)


@njit(**JIT_FAST_INNER)
def _input_gradient_tiled(d_pre, W, WT, d_x):
    """d_x = d_pre Wᵀ with the tiled kernels: an NN product on Wᵀ, copied into the scratch WT
    where it is one (see _transpose_scratch), else on the view W.T (one output: a row) or as
    dot products of rows (narrow inputs)."""
    if WT.shape == W.shape[::-1]:
        transpose_tiled(W, WT)
        matmul_tiled(d_pre, WT, d_x)
    else:
        matmul_tiled(d_pre, W.T, d_x)


#: OpenBLAS core types whose NT sgemm is as fast as NN (measured on AVX2, Zen 3 with the Haswell
#: kernels: 100×64·(64×64)ᵀ 11.8 µs either way, bit-identical): there the copy of Wᵀ (1.3 µs for
#: 64×64) buys nothing. Zen runs OpenBLAS's Haswell kernels. SkylakeX's NT is ~40% slower.
_NT_AS_FAST_AS_NN = frozenset({"Haswell", "Zen"})


def _transposed_copy_pays() -> bool:
    """Whether d_x = d_pre·Wᵀ runs faster as an NN product on a copy of Wᵀ than as BLAS's NT one:
    yes unless every loaded BLAS reports a core type measured otherwise."""
    cores = blas_core_types()
    return not (cores and cores <= _NT_AS_FAST_AS_NN)


def _transpose_scratch(device, W, kind="blas") -> Array:
    """Per call site scratch for Wᵀ, made when the call is staged (no allocation per step); a
    (1, 1) placeholder where the product runs without the copy: for BLAS, inputs narrower than 16
    (the transposed GEMM is no slower) and where its NT product is no slower anyway (see
    _NT_AS_FAST_AS_NN); for the tiled kernels, input widths that are not a multiple of 8 (dot
    products of rows) and one-output layers (Wᵀ is then a contiguous row)."""
    if kind == "tiled":
        wide = W.shape[0] % 8 == 0 and W.shape[1] > 1
    else:
        wide = W.shape[0] >= 16 and _transposed_copy_pays()
    return zeros(device, W.shape[::-1] if wide else (1, 1), W.dtype.type)


@njit(**JIT_FAST)
def dense_backward_blas(x, W, pre, out, d_out, d_pre, dW, db, code):
    _activation_backward(pre, out, d_out, d_pre, db, code)
    np.dot(x.T, d_pre, dW)


@njit(**JIT_FAST)
def dense_backward_input_blas(x, W, WT, pre, out, d_out, d_pre, dW, db, d_x, code):
    _activation_backward(pre, out, d_out, d_pre, db, code)
    np.dot(x.T, d_pre, dW)
    _input_gradient_blas(d_pre, W, WT, d_x)


@njit(**JIT_FAST)
def dense_backward_tiled(x, W, pre, out, d_out, d_pre, dW, db, code):
    _activation_backward(pre, out, d_out, d_pre, db, code)
    matmul_tiled(x.T, d_pre, dW)


@njit(**JIT_FAST)
def dense_backward_input_tiled(x, W, WT, pre, out, d_out, d_pre, dW, db, d_x, code):
    _activation_backward(pre, out, d_out, d_pre, db, code)
    matmul_tiled(x.T, d_pre, dW)
    _input_gradient_tiled(d_pre, W, WT, d_x)


@njit(**JIT_FAST)
def dense_backward_loop(x, W, pre, out, d_out, d_pre, dW, db, code):
    _activation_backward(pre, out, d_out, d_pre, db, code)
    matmul_loop(x.T, d_pre, dW)  # each dW[p, j] sums over i in order, as the loop over x did


@njit(**JIT_FAST)
def dense_backward_input_loop(x, W, pre, out, d_out, d_pre, dW, db, d_x, code):
    _activation_backward(pre, out, d_out, d_pre, db, code)
    matmul_loop(x.T, d_pre, dW)  # each dW[p, j] sums over i in order, as the loop over x did
    _input_gradient_loop(d_pre, W, d_x)


@njit(**JIT_FAST_INNER)
def _activation_backward_only(pre, out, d_out, d_pre, code):
    """d_pre = d_out * activation'(pre) over the flattened arrays (nothing to do for the identity
    on one buffer)."""
    if code == Activation.IDENTITY and d_pre.ctypes.data == d_out.ctypes.data:
        return
    p = pre.reshape(pre.size)
    o = out.reshape(out.size)
    g = d_out.reshape(d_out.size)
    d = d_pre.reshape(d_pre.size)
    if code == Activation.RELU:
        for i in range(p.size):
            d[i] = g[i] if p[i] > 0 else 0
    elif code == Activation.TANH:
        for i in range(p.size):
            d[i] = g[i] * (1 - o[i] * o[i])
    elif code == Activation.GELU:
        for i in range(p.size):
            v = p[i]
            d[i] = g[i] * (0.5 * (1.0 + math.erf(v * SQRT_HALF)) + v * math.exp(-0.5 * v * v) * INV_SQRT_2PI)
    else:
        for i in range(p.size):
            d[i] = g[i]


@njit(**JIT_FAST)
def dense_input_gradient_blas(W, WT, pre, out, d_out, d_pre, d_x, code):
    _activation_backward_only(pre, out, d_out, d_pre, code)
    _input_gradient_blas(d_pre, W, WT, d_x)


@njit(**JIT_FAST)
def dense_input_gradient_tiled(W, WT, pre, out, d_out, d_pre, d_x, code):
    _activation_backward_only(pre, out, d_out, d_pre, code)
    _input_gradient_tiled(d_pre, W, WT, d_x)


@njit(**JIT_FAST)
def dense_input_gradient_loop(W, pre, out, d_out, d_pre, d_x, code):
    _activation_backward_only(pre, out, d_out, d_pre, code)
    _input_gradient_loop(d_pre, W, d_x)


@njit(**JIT_FAST_INNER)
def _input_gradient_masked_tiled(d_pre, W, WT, d_x, mask):
    """_input_gradient_tiled, then 0 where mask is not > 0 (the ReLU backward of the layer below),
    in the tiles' stores where they fit, else as a pass of the same selects."""
    if WT.shape == W.shape[::-1]:
        transpose_tiled(W, WT)
        if matmul_mask_tiled(d_pre, WT, d_x, mask):
            return
        matmul_tiled(d_pre, WT, d_x)
    else:
        if matmul_mask_tiled(d_pre, W.T, d_x, mask):
            return
        matmul_tiled(d_pre, W.T, d_x)
    m, n = d_x.shape
    for i in range(m):
        for j in range(n):
            v = d_x[i, j]
            d_x[i, j] = v if mask[i, j] > 0 else 0


@njit(**JIT_FAST)
def dense_backward_masked_tiled(x, W, WT, pre, out, d_out, d_pre, dW, db, d_x, code):
    _activation_backward(pre, out, d_out, d_pre, db, code)
    matmul_tiled(x.T, d_pre, dW)
    _input_gradient_masked_tiled(d_pre, W, WT, d_x, x)


@njit(**JIT_FAST)
def dense_input_gradient_masked_tiled(W, WT, pre, out, d_out, d_pre, d_x, mask, code):
    _activation_backward_only(pre, out, d_out, d_pre, code)
    _input_gradient_masked_tiled(d_pre, W, WT, d_x, mask)


def relu_fusable(x, W) -> bool:
    """Whether the input gradient of a layer with input ``x`` (a ReLU's output) and weights ``W``
    can apply that ReLU's backward in its product's stores (the tiled products)."""
    return _product_kernel(W.dtype, x.shape[0], *W.shape) == "tiled"


def dense_backward_fused(
    device: CPU, x, W, pre, out, d_out, d_pre, dW, db, d_x, activation, gradient_in, relu_below
) -> None:
    """dense_backward on the CPU with an MLP backward's two fusions. ``gradient_in``: ``d_out``
    already is the gradient w.r.t. the pre-activation (the layer above applied this layer's ReLU
    backward), so ``d_pre`` is ``d_out`` and only the bias gradient is summed. ``relu_below``: ``x``
    is a ReLU's output (see relu_fusable) and ``d_x`` comes back as the gradient w.r.t. that
    ReLU's input: 0 where x is not > 0. The same bits as the unfused calls."""
    code = int(Activation.IDENTITY if gradient_in else activation)
    if relu_below and d_x is not None:
        scratch = _transpose_scratch(device, W, "tiled")
        launch(device, dense_backward_masked_tiled, x, W, scratch, pre, out, d_out, d_pre, dW, db, d_x, code)
    else:
        _stage_dense_backward(device, x, W, pre, out, d_out, d_pre, dW, db, d_x, code)


def dense_input_gradient_fused(device: CPU, W, pre, out, d_out, d_pre, d_x, activation, gradient_in, mask) -> None:
    """dense_input_gradient on the CPU with the fusions of dense_backward_fused; ``mask``: the
    ReLU output of the layer below (or None), 0 in ``d_x`` where it is not > 0."""
    code = int(Activation.IDENTITY if gradient_in else activation)
    if mask is not None:
        scratch = _transpose_scratch(device, W, "tiled")
        launch(device, dense_input_gradient_masked_tiled, W, scratch, pre, out, d_out, d_pre, d_x, mask, code)
    else:
        _stage_dense_input_gradient(device, W, pre, out, d_out, d_pre, d_x, code)


@api.dense_input_gradient.dispatch
def dense_input_gradient(device: CPU, W, pre, out, d_out, d_pre, d_x, activation):
    _stage_dense_input_gradient(device, W, pre, out, d_out, d_pre, d_x, int(activation))


def _stage_dense_input_gradient(device, W, pre, out, d_out, d_pre, d_x, code) -> None:
    kind = _product_kernel(d_x.dtype, pre.shape[0], *W.shape)
    if kind == "loop":
        launch(device, dense_input_gradient_loop, W, pre, out, d_out, d_pre, d_x, code)
    else:
        kernel = dense_input_gradient_tiled if kind == "tiled" else dense_input_gradient_blas
        launch(device, kernel, W, _transpose_scratch(device, W, kind), pre, out, d_out, d_pre, d_x, code)


@api.dense_backward.dispatch
def dense_backward(device: CPU, x, W, pre, out, d_out, d_pre, dW, db, d_x, activation):
    _stage_dense_backward(device, x, W, pre, out, d_out, d_pre, dW, db, d_x, int(activation))


def _stage_dense_backward(device, x, W, pre, out, d_out, d_pre, dW, db, d_x, code) -> None:
    kind = _product_kernel(dW.dtype, x.shape[0], *W.shape)
    if d_x is None:
        kernel = {"loop": dense_backward_loop, "tiled": dense_backward_tiled, "blas": dense_backward_blas}[kind]
        launch(device, kernel, x, W, pre, out, d_out, d_pre, dW, db, code)
    elif kind != "loop":
        launch(
            device,
            dense_backward_input_tiled if kind == "tiled" else dense_backward_input_blas,
            x,
            W,
            _transpose_scratch(device, W, kind),
            pre,
            out,
            d_out,
            d_pre,
            dW,
            db,
            d_x,
            code,
        )
    else:
        launch(device, dense_backward_input_loop, x, W, pre, out, d_out, d_pre, dW, db, d_x, code)


@njit(**JIT_FAST)
def mse_loss_kernel(pred, target, loss):
    p = pred.reshape(pred.size)
    t = target.reshape(target.size)
    acc = 0.0
    for i in range(p.size):
        d = np.float64(p[i]) - np.float64(t[i])
        acc += d * d
    loss[0] = acc / p.size


@njit(**JIT_FAST)
def mse_gradient_kernel(pred, target, d_pred):
    p = pred.reshape(pred.size)
    t = target.reshape(target.size)
    d = d_pred.reshape(d_pred.size)
    scale = 2.0 / p.size
    for i in range(p.size):
        d[i] = (p[i] - t[i]) * scale


@njit(**JIT_FAST_INNER)
def adam_element(i, p, g, m, v, b1, b2, one_minus_b1, one_minus_b2, step_size, inv_sqrt_correction2, epsilon):
    """Adam on element i (the CUDA kernels' body too), with the step's bias corrections folded
    into ``step_size`` and ``inv_sqrt_correction2``."""
    gi = g[i]
    mi = b1 * m[i] + one_minus_b1 * gi
    vi = b2 * v[i] + one_minus_b2 * gi * gi
    m[i] = mi
    v[i] = vi
    p[i] -= step_size * mi / (math.sqrt(vi) * inv_sqrt_correction2 + epsilon)


@njit(**JIT_FAST)
def adam_step_kernel(param, grad, m, v, t, lr, beta1, beta2, eps):
    t[0] += 1
    # Scalars in the array's dtype, so float32 parameters update in float32 SIMD lanes.
    real = param.dtype.type
    b1, b2 = real(beta1), real(beta2)
    one_minus_b1, one_minus_b2 = real(1 - beta1), real(1 - beta2)
    step_size = real(lr / (1.0 - beta1 ** t[0]))
    inv_sqrt_correction2 = real(1.0 / math.sqrt(1.0 - beta2 ** t[0]))
    epsilon = real(eps)
    p = param.reshape(param.size)
    g = grad.reshape(grad.size)
    m_ = m.reshape(m.size)
    v_ = v.reshape(v.size)
    for i in range(p.size):
        adam_element(i, p, g, m_, v_, b1, b2, one_minus_b1, one_minus_b2, step_size, inv_sqrt_correction2, epsilon)


@njit(**JIT_FAST)
def adam_step_lr_array_kernel(param, grad, m, v, t, lr, beta1, beta2, eps):
    adam_step_kernel(param, grad, m, v, t, lr[0], beta1, beta2, eps)


@njit(**JIT_FAST)
def polyak_update_kernel(target, source, polyak):
    real = target.dtype.type
    keep, take = real(polyak), real(1 - polyak)
    t = target.reshape(target.size)
    s = source.reshape(source.size)
    for i in range(t.size):
        t[i] = keep * t[i] + take * s[i]


@njit(**JIT_FAST_INNER)
def weight_decay_at(i, param, decay) -> None:
    """param[i] -= decay · param[i], the product in param's dtype: the one body of the CPU loop and
    the CUDA kernels (per_index)."""
    param[i] -= param.dtype.type(decay) * param[i]


@njit(**JIT_FAST)
def weight_decay_step_kernel(param, decay):
    p = param.reshape(param.size)
    for i in range(p.size):
        weight_decay_at(i, p, decay)


@njit(**JIT_EXACT_INNER)
def accumulate_squared_norm_flat(x, total) -> None:
    """total[0] += Σ x[i]² over a 1-D x, in float64 and index order: the one body of the CPU
    kernel and the CUDA kernels (once)."""
    s = 0.0
    for i in range(x.size):
        xi = np.float64(x[i])
        s += xi * xi
    total[0] += s


@njit(**JIT_EXACT)
def accumulate_squared_norm_kernel(x, total):
    accumulate_squared_norm_flat(x.reshape(x.size), total)


@njit(**JIT_EXACT_INNER)
def clip_by_norm_at(i, x, total, max_norm) -> None:
    """x[i] scaled by max_norm / (norm + eps) where that is below 1, the factor rounded to x's
    dtype: the one body of the CPU loop and the CUDA kernels (per_index)."""
    factor = max_norm / (math.sqrt(total[0]) + api.GRAD_NORM_EPS)
    if factor < 1.0:
        x[i] *= x.dtype.type(factor)


clip_by_norm_kernel = per_index(clip_by_norm_at, "x.size", "clip_by_norm_kernel", before=["x = x.reshape(x.size)"])


@njit(**JIT_EXACT)
def linear_schedule_kernel(counter, total, start, end, out):
    fraction = counter[0] / total
    out[0] = start + (end - start) * min(fraction, 1.0)


@njit(**JIT_FAST)
def fill_kernel(out, value):
    o = out.reshape(out.size)
    for i in range(o.size):
        o[i] = value


@njit(**JIT_FAST)
def copy_kernel(src, dst):
    s = src.reshape(src.size)
    d = dst.reshape(dst.size)
    for i in range(s.size):
        d[i] = s[i]


@njit(**JIT_EXACT_INNER)
def clip_at(i, x, low, high, out):
    """Element ``i`` of clip (flat arrays)."""
    out[i] = min(max(x[i], low), high)


@njit(**JIT_EXACT)
def clip_kernel(x, low, high, out):
    flat_x, flat_out = x.reshape(x.size), out.reshape(out.size)
    for i in range(flat_x.size):
        clip_at(i, flat_x, low, high, flat_out)


@njit(**JIT_EXACT)
def row_argmax(q, i):
    """The column of row ``i``'s first maximum."""
    best = 0
    for j in range(1, q.shape[1]):
        if q[i, j] > q[i, best]:
            best = j
    return best


@njit(**JIT_EXACT_INNER)
def argmax_at(i, x, out):
    """Row ``i`` of argmax."""
    out[i, 0] = row_argmax(x, i)


@njit(**JIT_EXACT)
def argmax_kernel(x, out):
    for i in range(x.shape[0]):
        argmax_at(i, x, out)


@njit(**JIT_EXACT)
def increment_kernel(counter, amount):
    counter[0] += amount


@njit(**JIT_EXACT)  # not fastmath: it would assume no NaN/inf and fold the test away
def nonfinite_flag_kernel(x, flag, code):
    if flag[0] != 0:
        return
    v = x.reshape(x.size)
    bad = False
    for i in range(v.size):
        bad |= not math.isfinite(v[i])  # no early exit: the loop vectorises
    if bad:
        flag[0] = code
