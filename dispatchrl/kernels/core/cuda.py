"""CUDA methods of the core generic functions: numba.cuda kernels, one thread per output element.

Methods pick the launch configuration from the static shapes and hand a
:class:`~dispatchrl.backends.cuda.Launch` to :func:`launch`. Each kernel also has a block-level form
(:func:`~dispatchrl.backends.cuda.block_form`), the same per-element body in block-stride loops,
which a fused step calls inside its one single-block kernel."""

import math

import numpy as np
from numba import cuda, float64

from ...activation import Activation
from ...arrays import Array
from ...backends.cuda import (
    BLOCK_WORK,
    DYNAMIC_SHARED,
    MAX_FUSED_BLOCK,
    REDUCE_THREADS,
    Launch,
    block_form,
    device_twin,
    flat,
    generated,
    lanes_total,
    launch_1d,
    launch_once,
    once,
    per_index,
    thread_index,
)
from ...devices import CUDA
from ...staging import launch
from . import api, cpu
from .api import INV_SQRT_2PI, SQRT_HALF

__all__ = ["adam_elements", "increment_kernel", "row_argmax"]


@cuda.jit(device=True)
def _activate(v, code):
    if code == Activation.RELU:
        return v if v > 0 else 0.0
    if code == Activation.TANH:
        return math.tanh(v)
    if code == Activation.GELU:
        return 0.5 * v * (1.0 + math.erf(v * SQRT_HALF))
    return v


@cuda.jit(device=True)
def _activation_derivative(pre, out, code):
    if code == Activation.RELU:
        return 1.0 if pre > 0 else 0.0
    if code == Activation.TANH:
        return 1.0 - out * out
    if code == Activation.GELU:
        return 0.5 * (1.0 + math.erf(pre * SQRT_HALF)) + pre * math.exp(-0.5 * pre * pre) * INV_SQRT_2PI
    return 1.0


@cuda.jit
def activation_kernel(x, out, code):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = _activate(x[i], code)


@block_form(activation_kernel, lambda x, out, code: (x.size,))
@cuda.jit(device=True)
def activation_block(x, out, code, size):
    for i in range(thread_index(), size, cuda.blockDim.x):
        out[i] = _activate(x[i], code)


def _activation_method(activation):
    def method(device: CUDA, x, out):
        launch_1d(device, activation_kernel, x.size, flat(x), flat(out), int(activation))

    return method


api.register_activation_methods(_activation_method)


#: the tiled products (matmul, dense forward, weight and input gradients): a block computes a tile of
#: (threads / 16 * 4) x 64 outputs per pass, each thread 4 x 4 of them in registers, strided by the
#: block's thread rows and 16 columns so that shared-memory reads are conflict-free and stores
#: coalesce; both operands are staged in shared memory ``stage`` inner indices at a time: as many as
#: fit GEMM_STAGE_BYTES per staged row, 32 for float32 and 16 for float64, so that either stays
#: within the 48 KiB of dynamic shared memory a launch gets without opting in (32 x (257 + 65) x 4 =
#: 41,216 B; float64 at 32 was 82 KiB and failed to launch on an H100). The grid kernels stage 16.
GEMM_STAGE_BYTES = 128
GRID_STAGE = 16
GEMM_THREAD_COLS = 16
GEMM_COLS = 4 * GEMM_THREAD_COLS
GEMM_ROWS = MAX_FUSED_BLOCK // GEMM_THREAD_COLS * 4
#: staged tiles' row lengths, one word longer: a transposed operand's staging stores would otherwise hit one bank
GEMM_A_PITCH = GEMM_ROWS + 1
GEMM_B_PITCH = GEMM_COLS + 1
#: threads of a block of the grid (unfused) products: a 64 x 64 output tile each
GEMM_BLOCK = 256


#: every index of the products is non-negative: unsigned, numba adds no negative-index wraparound,
#: which would keep the compiler from folding constant offsets into loads (one register per address)
U = np.uint64


@cuda.jit(device=True)
def _multiply_add(acc, staged, b_offset, kk, tx, ty, thread_rows):
    """acc += the outer product of this thread's 4 staged values of op(a) and of op(b) at inner index kk."""
    row = kk * GEMM_A_PITCH + ty
    a0 = staged[U(row)]
    a1 = staged[U(row + thread_rows)]
    a2 = staged[U(row + 2 * thread_rows)]
    a3 = staged[U(row + 3 * thread_rows)]
    col = b_offset + kk * GEMM_B_PITCH + tx
    for s in range(4):
        b = staged[U(col + GEMM_THREAD_COLS * s)]
        acc[0, s] += a0 * b
        acc[1, s] += a1 * b
        acc[2, s] += a2 * b
        acc[3, s] += a3 * b


#: a product with fewer output rows or columns than this (a network's 1-wide value head, a first
#: layer's weight gradient with a 3-column observation) takes one thread per output instead of
#: 64 x 64 tiles: a tile would compute 64 columns to keep one
GEMM_NARROW = 8


@cuda.jit(device=True)
def _element(x, transposed, i, k) -> float:
    """op(x)[i, k]."""
    return x[U(k), U(i)] if transposed else x[U(i), U(k)]


@cuda.jit(device=True)
def _gemm_per_output(
    a, a_transposed, b, b_transposed, c, rows, cols, inner, first, step, bias, pre, code, dense
) -> None:
    """gemm_tiles' product, one thread per output, the same sum in the same order (from zero along
    the inner index): for shapes where tiles would be mostly padding."""
    threads = cuda.blockDim.x
    full = inner - inner % 4
    for o in range(first * threads + thread_index(), rows * cols, step * threads):
        i = o // cols
        j = o % cols
        acc = c.dtype.type(0)
        for k in range(0, full, 4):  # four loads of each operand in flight, then the four adds in order
            a0, a1 = _element(a, a_transposed, i, k), _element(a, a_transposed, i, k + 1)
            a2, a3 = _element(a, a_transposed, i, k + 2), _element(a, a_transposed, i, k + 3)
            b0, b1 = _element(b, not b_transposed, j, k), _element(b, not b_transposed, j, k + 1)
            b2, b3 = _element(b, not b_transposed, j, k + 2), _element(b, not b_transposed, j, k + 3)
            acc += a0 * b0
            acc += a1 * b1
            acc += a2 * b2
            acc += a3 * b3
        for k in range(full, inner):
            acc += _element(a, a_transposed, i, k) * _element(b, not b_transposed, j, k)
        if dense:
            v = acc + bias[U(j)]
            pre[U(i), U(j)] = v
            c[U(i), U(j)] = _activate(v, code)
        else:
            c[U(i), U(j)] = acc


@cuda.jit(device=True)
def _multiply_add8(acc, staged, b_offset, first, tx, ty, thread_rows) -> None:
    """_multiply_add at inner indices first, ..., first + 7 (a literal: the offsets fold into the loads)."""
    _multiply_add(acc, staged, b_offset, first, tx, ty, thread_rows)
    _multiply_add(acc, staged, b_offset, first + 1, tx, ty, thread_rows)
    _multiply_add(acc, staged, b_offset, first + 2, tx, ty, thread_rows)
    _multiply_add(acc, staged, b_offset, first + 3, tx, ty, thread_rows)
    _multiply_add(acc, staged, b_offset, first + 4, tx, ty, thread_rows)
    _multiply_add(acc, staged, b_offset, first + 5, tx, ty, thread_rows)
    _multiply_add(acc, staged, b_offset, first + 6, tx, ty, thread_rows)
    _multiply_add(acc, staged, b_offset, first + 7, tx, ty, thread_rows)


def gemm_stage(dtype) -> int:
    """Inner indices a fused product of output ``dtype`` stages per pass (a literal in the fused
    kernel's source): 32 for float32, 16 for float64."""
    return min(32, max(8, GEMM_STAGE_BYTES // np.dtype(dtype).itemsize))


def gemm_shared_bytes(out, stage: int) -> int:
    """Dynamic shared memory gemm_tiles needs for output ``out`` staged ``stage`` inner indices at a time."""
    return stage * (GEMM_A_PITCH + GEMM_B_PITCH) * np.dtype(out.dtype).itemsize


def product_forms(name: str, params: str, operands: str, epilogue: str | None = None) -> tuple:
    """The grid kernel ``<name>_kernel(params)`` and block form ``<name>_block`` of one product
    ``operands`` = "a, a_transposed, b, b_transposed, c", both ``gemm_tiles(operands, rows, cols,
    inner, first, step, epilogue, stage)`` with rows x cols = c's shape: the grid's blocks take
    the output tiles in turn, staging GRID_STAGE inner indices; the block form's one block takes
    them all, with the sizes and its staging depth as literals. ``epilogue`` (bias, pre, code,
    dense) is a dense layer's; none by default. The kernel's dynamic shared memory and work (rows
    x cols x inner) are registered from the same sizes."""
    a, a_transposed, _, _, c = (operand.strip() for operand in operands.split(","))
    rows, cols, inner = f"{c}.shape[0]", f"{c}.shape[1]", f"{a}.shape[{0 if a_transposed == 'True' else 1}]"
    epilogue = epilogue or f"{c}[0], {c}, 0, False"
    source = "\n".join(
        [
            f"def {name}_kernel({params}):",
            f"    gemm_tiles({operands}, {rows}, {cols}, {inner}, cuda.blockIdx.x, cuda.gridDim.x, {epilogue}, GRID_STAGE)",
            f"def {name}_block({params}, rows, cols, inner, stage):",
            f"    gemm_tiles({operands}, rows, cols, inner, 0, 1, {epilogue}, stage)",
            f"def {name}_shape({params}):",
            f"    return {rows}, {cols}, {inner}, {c}",
        ]
    )
    names = (f"{name}_kernel", f"{name}_block", f"{name}_shape")
    grid_py, block_py, shape = generated(
        __name__, name, source, names, {"gemm_tiles": gemm_tiles, "GRID_STAGE": GRID_STAGE}
    )
    kernel, block = cuda.jit(grid_py), cuda.jit(device=True)(block_py)

    def block_sizes(*args) -> tuple:
        rows, cols, inner, out = shape(*args)
        return rows, cols, inner, gemm_stage(out.dtype)

    DYNAMIC_SHARED[kernel] = lambda *args: gemm_shared_bytes(shape(*args)[3], block_sizes(*args)[3])
    BLOCK_WORK[kernel] = lambda *args: math.prod(shape(*args)[:3])
    block_form(kernel, block_sizes)(block)
    return kernel, block


@cuda.jit(device=True)
def gemm_tiles(a, a_transposed, b, b_transposed, c, rows, cols, inner, first, step, bias, pre, code, dense, stage):
    """``c = op(a) @ op(b)`` (``rows x inner`` times ``inner x cols``; op transposes where asked) by
    every thread of the calling block, which takes the output tiles ``first, first + step, ...``.
    With ``dense``: ``pre = op(a) @ op(b) + bias`` and ``c = activate(pre, code)``. The accumulators
    have the arrays' dtype (float32 for networks): no conversion inside the multiply-add loop.
    ``stage``: inner indices staged per pass, a multiple of 8 up to 32 (a literal in a fused step)."""
    if rows < GEMM_NARROW or cols < GEMM_NARROW:  # sizes are literals in a fused step: decided while compiling
        _gemm_per_output(a, a_transposed, b, b_transposed, c, rows, cols, inner, first, step, bias, pre, code, dense)
        return
    # dynamic: one region for every product of a fused kernel (the largest gemm_shared_bytes)
    staged = cuda.shared.array(0, c.dtype)
    acc = cuda.local.array((4, 4), c.dtype)
    tile_bias = cuda.local.array(4, c.dtype)
    zero = c.dtype.type(0)
    tid = thread_index()
    threads = cuda.blockDim.x  # a multiple of GEMM_THREAD_COLS
    thread_rows = threads // GEMM_THREAD_COLS
    tx = tid % GEMM_THREAD_COLS
    ty = tid // GEMM_THREAD_COLS
    tile_rows = 4 * thread_rows
    b_offset = stage * GEMM_A_PITCH  # op(b)'s staged tile follows op(a)'s
    # a transposed a is staged along its rows: each thread keeps one row and steps the inner index
    at_row = tid % tile_rows
    at_first = tid // tile_rows
    at_step = threads // tile_rows
    tiles_n = (cols + GEMM_COLS - 1) // GEMM_COLS
    tiles = (rows + tile_rows - 1) // tile_rows * tiles_n
    for tile in range(first, tiles, step):
        m0 = tile // tiles_n * tile_rows
        n0 = tile % tiles_n * GEMM_COLS
        for r in range(4):
            for s in range(4):
                acc[r, s] = 0
        for k0 in range(0, inner, stage):
            # stage op(a)[m0:, k0:] and op(b)[k0:, n0:], zero outside the matrices: consecutive
            # threads read along the operand's contiguous axis
            if a_transposed:
                for kk in range(at_first, stage, at_step):
                    inside = m0 + at_row < rows and k0 + kk < inner
                    staged[U(kk * GEMM_A_PITCH + at_row)] = a[U(k0 + kk), U(m0 + at_row)] if inside else zero
            else:
                for e in range(tid, tile_rows * stage, threads):
                    mm = e // stage
                    kk = e % stage
                    inside = m0 + mm < rows and k0 + kk < inner
                    staged[U(kk * GEMM_A_PITCH + mm)] = a[U(m0 + mm), U(k0 + kk)] if inside else zero
            if b_transposed:
                for e in range(tid, GEMM_COLS * stage, threads):
                    nn = e // stage
                    kk = e % stage
                    inside = n0 + nn < cols and k0 + kk < inner
                    staged[U(b_offset + kk * GEMM_B_PITCH + nn)] = b[U(n0 + nn), U(k0 + kk)] if inside else zero
            else:
                for kk in range(tid // GEMM_COLS, stage, max(1, threads // GEMM_COLS)):
                    for nn in range(tid % GEMM_COLS, GEMM_COLS, threads):
                        inside = n0 + nn < cols and k0 + kk < inner
                        staged[U(b_offset + kk * GEMM_B_PITCH + nn)] = b[U(k0 + kk), U(n0 + nn)] if inside else zero
            cuda.syncthreads()
            # by hand: numba's range loop would keep 64-bit counters and recompute every address;
            # eights past the operands' inner extent are skipped (all zeros)
            _multiply_add8(acc, staged, b_offset, 0, tx, ty, thread_rows)
            if k0 + 8 < inner:
                _multiply_add8(acc, staged, b_offset, 8, tx, ty, thread_rows)
            if stage > 16:
                if k0 + 16 < inner:
                    _multiply_add8(acc, staged, b_offset, 16, tx, ty, thread_rows)
                if k0 + 24 < inner:
                    _multiply_add8(acc, staged, b_offset, 24, tx, ty, thread_rows)
            cuda.syncthreads()
        if dense:  # the tile's 4 bias values before any store (loaded between stores, each load was waited out)
            for s in range(4):
                j = n0 + tx + GEMM_THREAD_COLS * s
                tile_bias[s] = bias[U(j)] if j < cols else zero
        for r in range(4):
            i = m0 + ty + thread_rows * r
            for s in range(4):
                j = n0 + tx + GEMM_THREAD_COLS * s
                if i < rows and j < cols:
                    if dense:
                        v = acc[r, s] + tile_bias[s]
                        pre[U(i), U(j)] = v
                        c[U(i), U(j)] = _activate(v, code)
                    else:
                        c[U(i), U(j)] = acc[r, s]


def _gemm_launch(kernel, out) -> Launch:
    rows, cols = out.shape
    tiles = -(-rows // (GEMM_BLOCK // GEMM_THREAD_COLS * 4)) * -(-cols // GEMM_COLS)
    return Launch(kernel, (tiles,), (GEMM_BLOCK,), gemm_shared_bytes(out, GRID_STAGE))


matmul_kernel, matmul_block = product_forms("matmul", "a, b, out", "a, False, b, False, out")


@api.matmul.dispatch
def matmul(device: CUDA, a, b, out):
    launch(device, _gemm_launch(matmul_kernel, out), a, b, out)


dense_forward_kernel, dense_forward_block = product_forms(
    "dense_forward", "x, W, b, pre, out, code", "x, False, W, False, out", "b, pre, code, True"
)


@api.dense_forward.dispatch
def dense_forward(device: CUDA, x, W, b, pre, out, activation):
    launch(device, _gemm_launch(dense_forward_kernel, pre), x, W, b, pre, out, int(activation))


def _activation_backward_at(i, pre, out, d_out, d_pre, code):
    d_pre[i] = d_out[i] * _activation_derivative(pre[i], out[i], code)


activation_backward_kernel = per_index(_activation_backward_at, "pre.size")


# dW = xᵀ d_pre
weight_gradient_kernel, weight_gradient_block = product_forms(
    "weight_gradient", "x, d_pre, dW", "x, True, d_pre, False, dW"
)


@cuda.jit(device=True)
def _bias_gradient_at(j, d_pre, db, batch):
    acc = d_pre[0, j]  # the array's dtype: no float64 accumulation
    for i in range(1, batch):
        acc += d_pre[i, j]
    db[j] = acc


@cuda.jit
def bias_gradient_kernel(d_pre, db):
    j = cuda.grid(1)
    if j < db.size:
        _bias_gradient_at(j, d_pre, db, d_pre.shape[0])


#: partial sums per column of a fused step's bias gradient, for layers up to BIAS_LANES_WIDTH wide
#: (wider ones take one per column): a fixed count, so that the sums do not depend on the block size
BIAS_LANES = 8
BIAS_LANES_WIDTH = 256


def _bias_lanes(size: int) -> int:
    return BIAS_LANES if size <= BIAS_LANES_WIDTH else 1


@block_form(bias_gradient_kernel, lambda d_pre, db: (db.size, d_pre.shape[0]))
@cuda.jit(device=True)
def bias_gradient_block(d_pre, db, size, batch):
    """db = d_pre's column sums by the whole block. One thread per column left 448 of 512 threads
    idle while each summed the batch alone: BIAS_LANES lanes per column now each sum every
    BIAS_LANES-th row (consecutive threads read consecutive columns), and the lanes' sums are added
    pairwise in shared memory."""
    lanes = BIAS_LANES if size <= BIAS_LANES_WIDTH else 1  # _bias_lanes(size), a literal while compiling
    if lanes == 1:
        for j in range(thread_index(), size, cuda.blockDim.x):
            _bias_gradient_at(j, d_pre, db, batch)
        return
    partial = cuda.shared.array(0, d_pre.dtype)  # slot lane * size + j
    tid = thread_index()
    threads = cuda.blockDim.x
    for e in range(tid, lanes * size, threads):
        lane = e // size
        acc = d_pre.dtype.type(0)
        for i in range(lane, batch, lanes):
            acc += d_pre[U(i), U(e % size)]
        partial[U(e)] = acc
    cuda.syncthreads()
    half = lanes // 2
    while half > 0:
        for e in range(tid, half * size, threads):
            partial[U(e)] += partial[U(e + half * size)]
        cuda.syncthreads()
        half //= 2
    for j in range(tid, size, threads):
        db[U(j)] = partial[U(j)]


DYNAMIC_SHARED[bias_gradient_kernel] = lambda d_pre, db: _bias_lanes(db.size) * db.size * d_pre.dtype.itemsize


# d_x = d_pre Wᵀ
input_gradient_kernel, input_gradient_block = product_forms(
    "input_gradient", "d_pre, W, d_x", "d_pre, False, W, True, d_x"
)


@api.dense_backward.dispatch
def dense_backward(device: CUDA, x, W, pre, out, d_out, d_pre, dW, db, d_x, activation):
    launch_1d(
        device, activation_backward_kernel, pre.size, flat(pre), flat(out), flat(d_out), flat(d_pre), int(activation)
    )
    launch(device, _gemm_launch(weight_gradient_kernel, dW), x, d_pre, dW)
    launch_1d(device, bias_gradient_kernel, db.size, d_pre, db)
    if d_x is not None:
        launch(device, _gemm_launch(input_gradient_kernel, d_x), d_pre, W, d_x)


@api.dense_input_gradient.dispatch
def dense_input_gradient(device: CUDA, W, pre, out, d_out, d_pre, d_x, activation):
    launch_1d(
        device, activation_backward_kernel, pre.size, flat(pre), flat(out), flat(d_out), flat(d_pre), int(activation)
    )
    launch(device, _gemm_launch(input_gradient_kernel, d_x), d_pre, W, d_x)


@cuda.jit(device=True)
def mse_loss_block(pred, target, loss, size):
    """The mean squared error by one block of any power-of-two size up to MAX_FUSED_BLOCK."""
    partial = cuda.shared.array(0, dtype=float64)  # the dynamic region: see DYNAMIC_SHARED
    tid = thread_index()
    threads = cuda.blockDim.x
    acc = 0.0
    for i in range(tid, size, threads):
        d = np.float64(pred[i]) - np.float64(target[i])
        acc += d * d
    total = lanes_total(partial, acc, tid, threads)
    if tid == 0:
        loss[0] = total / size


@cuda.jit
def mse_loss_kernel(pred, target, loss):
    mse_loss_block(pred, target, loss, pred.size)


block_form(mse_loss_kernel, lambda pred, target, loss: (pred.size,))(mse_loss_block)
DYNAMIC_SHARED[mse_loss_kernel] = lambda pred, target, loss: 8 * MAX_FUSED_BLOCK


@api.mse_loss.dispatch
def mse_loss(device: CUDA, pred, target, loss):
    launch(device, Launch(mse_loss_kernel, (1,), (REDUCE_THREADS,), 8 * REDUCE_THREADS), flat(pred), flat(target), loss)


@cuda.jit
def mse_gradient_kernel(pred, target, d_pred):
    i = cuda.grid(1)
    if i < pred.size:
        d_pred[i] = (pred[i] - target[i]) * (2.0 / pred.size)


@block_form(mse_gradient_kernel, lambda pred, target, d_pred: (pred.size,))
@cuda.jit(device=True)
def mse_gradient_block(pred, target, d_pred, size):
    for i in range(thread_index(), size, cuda.blockDim.x):
        d_pred[i] = (pred[i] - target[i]) * (2.0 / size)


@api.mse_gradient.dispatch
def mse_gradient(device: CUDA, pred, target, d_pred):
    launch_1d(device, mse_gradient_kernel, pred.size, flat(pred), flat(target), flat(d_pred))


_adam_element = device_twin(cpu.adam_element)


@cuda.jit(device=True)
def adam_elements(first, stride, size, param, grad, m, v, step, lr, beta1, beta2, eps):
    """Adam on elements ``first, first + stride, ... < size`` at step ``step`` (the counter's value
    after this update): the CPU kernel's formula, its bias corrections computed once per thread and
    the elements updated in the parameters' dtype. (Per element in float64, with two powers, it was
    68k cycles of the demo's 281k per step on an H100.)"""
    real = param.dtype.type
    step_size = real(lr / (1.0 - beta1**step))
    inv_sqrt_correction2 = real(1.0 / math.sqrt(1.0 - beta2**step))
    b1, b2 = real(beta1), real(beta2)
    one_minus_b1, one_minus_b2 = real(1 - beta1), real(1 - beta2)
    epsilon = real(eps)
    for i in range(first, size, stride):
        _adam_element(
            i, param, grad, m, v, b1, b2, one_minus_b1, one_minus_b2, step_size, inv_sqrt_correction2, epsilon
        )


# the counter itself advances in increment_kernel, after every thread read it
@cuda.jit
def adam_step_kernel(param, grad, m, v, t, lr, beta1, beta2, eps):
    adam_elements(cuda.grid(1), cuda.gridsize(1), param.size, param, grad, m, v, t[0] + 1, lr, beta1, beta2, eps)


@cuda.jit
def adam_step_lr_array_kernel(param, grad, m, v, t, lr, beta1, beta2, eps):
    adam_elements(cuda.grid(1), cuda.gridsize(1), param.size, param, grad, m, v, t[0] + 1, lr[0], beta1, beta2, eps)


def _adam_sizes(param, grad, m, v, t, lr, beta1, beta2, eps) -> tuple:
    return (param.size,)


@block_form(adam_step_kernel, _adam_sizes)
@cuda.jit(device=True)
def adam_step_block(param, grad, m, v, t, lr, beta1, beta2, eps, size):
    adam_elements(thread_index(), cuda.blockDim.x, size, param, grad, m, v, t[0] + 1, lr, beta1, beta2, eps)


@block_form(adam_step_lr_array_kernel, _adam_sizes)
@cuda.jit(device=True)
def adam_step_lr_array_block(param, grad, m, v, t, lr, beta1, beta2, eps, size):
    adam_elements(thread_index(), cuda.blockDim.x, size, param, grad, m, v, t[0] + 1, lr[0], beta1, beta2, eps)


@cuda.jit
def increment_kernel(counter, index, amount):
    if cuda.grid(1) == 0:
        counter[index] += amount


@block_form(increment_kernel)
@cuda.jit(device=True)
def increment_block(counter, index, amount):
    if thread_index() == 0:
        counter[index] += amount


@api.adam_step.dispatch
def adam_step(device: CUDA, param, grad, m, v, t, lr, beta1, beta2, eps):
    launch_1d(device, adam_step_kernel, param.size, flat(param), flat(grad), flat(m), flat(v), t, lr, beta1, beta2, eps)
    launch(device, Launch(increment_kernel, (1,), (1,)), t, 0, 1)


@api.adam_step.dispatch
def adam_step(device: CUDA, param, grad, m, v, t, lr: Array, beta1, beta2, eps):
    launch_1d(
        device,
        adam_step_lr_array_kernel,
        param.size,
        flat(param),
        flat(grad),
        flat(m),
        flat(v),
        t,
        lr,
        beta1,
        beta2,
        eps,
    )
    launch(device, Launch(increment_kernel, (1,), (1,)), t, 0, 1)


@cuda.jit
def polyak_update_kernel(target, source, polyak):
    i = cuda.grid(1)
    if i < target.size:
        target[i] = polyak * target[i] + (1 - polyak) * source[i]


@block_form(polyak_update_kernel, lambda target, source, polyak: (target.size,))
@cuda.jit(device=True)
def polyak_update_block(target, source, polyak, size):
    for i in range(thread_index(), size, cuda.blockDim.x):
        target[i] = polyak * target[i] + (1 - polyak) * source[i]


@api.polyak_update.dispatch
def polyak_update(device: CUDA, target, source, polyak):
    launch_1d(device, polyak_update_kernel, target.size, flat(target), flat(source), polyak)


weight_decay_step_kernel = per_index(cpu.weight_decay_at, "param.size")


@api.weight_decay_step.dispatch
def weight_decay_step(device: CUDA, param, decay):
    launch_1d(device, weight_decay_step_kernel, param.size, flat(param), decay)


accumulate_squared_norm_kernel = once(cpu.accumulate_squared_norm_flat, name="accumulate_squared_norm")


@api.accumulate_squared_norm.dispatch
def accumulate_squared_norm(device: CUDA, x, total):
    # one thread: the sum's order is the CPU's (gradient clipping reads it once per update)
    launch_once(device, accumulate_squared_norm_kernel, flat(x), total)


clip_by_norm_kernel = per_index(cpu.clip_by_norm_at, "x.size")


@api.clip_by_norm.dispatch
def clip_by_norm(device: CUDA, x, total, max_norm):
    launch_1d(device, clip_by_norm_kernel, x.size, flat(x), total, max_norm)


linear_schedule_kernel = once(cpu.linear_schedule_kernel)


@api.linear_schedule.dispatch
def linear_schedule(device: CUDA, counter, total, start, end, out):
    launch_once(device, linear_schedule_kernel, counter, total, start, end, out)


@cuda.jit
def fill_kernel(out, value):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = value


@block_form(fill_kernel, lambda out, value: (out.size,))
@cuda.jit(device=True)
def fill_block(out, value, size):
    for i in range(thread_index(), size, cuda.blockDim.x):
        out[i] = value


@api.fill.dispatch
def fill(device: CUDA, out, value):
    launch_1d(device, fill_kernel, out.size, flat(out), value)


@cuda.jit
def copy_kernel(src, dst):
    i = cuda.grid(1)
    if i < src.size:
        dst[i] = src[i]


@block_form(copy_kernel, lambda src, dst: (src.size,))
@cuda.jit(device=True)
def copy_block(src, dst, size):
    for i in range(thread_index(), size, cuda.blockDim.x):
        dst[i] = src[i]


@api.copy.dispatch
def copy(device: CUDA, src, dst):
    launch_1d(device, copy_kernel, src.size, flat(src), flat(dst))


clip_kernel = per_index(cpu.clip_at, "x.size")


@api.clip.dispatch
def clip(device: CUDA, x, low, high, out):
    launch_1d(device, clip_kernel, x.size, flat(x), low, high, flat(out))


row_argmax = device_twin(cpu.row_argmax)
argmax_kernel = per_index(cpu.argmax_at, "x.shape[0]", row_argmax=row_argmax)


@api.argmax.dispatch
def argmax(device: CUDA, x, out):
    launch_1d(device, argmax_kernel, x.shape[0], x, out)


@api.increment.dispatch
def increment(device: CUDA, counter, amount):
    launch(device, Launch(increment_kernel, (1,), (1,)), counter, 0, amount)


@cuda.jit
def nonfinite_flag_kernel(x, flag, code):
    # one thread per element; a racy write is fine while every writer writes the same code, and
    # the flag is only set when it was 0 before the launch (read once, by every thread)
    i = cuda.grid(1)
    if i < x.size and flag[0] == 0 and not math.isfinite(x[i]):
        flag[0] = code


@block_form(nonfinite_flag_kernel, lambda x, flag, code: (x.size,))
@cuda.jit(device=True)
def nonfinite_flag_block(x, flag, code, size):
    # a thread may see another's write and skip its own: the flag ends the same
    for i in range(thread_index(), size, cuda.blockDim.x):
        if flag[0] == 0 and not math.isfinite(x[i]):
            flag[0] = code


@api.nonfinite_flag.dispatch
def nonfinite_flag(device: CUDA, x, flag, code):
    launch_1d(device, nonfinite_flag_kernel, x.size, flat(x), flag, code)
