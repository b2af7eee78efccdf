"""Register-blocked float32 matrix products for AVX2 + FMA and AVX-512 cores, as Numba intrinsics.

The dense layers of RL networks multiply L1/L2-resident operands (batch 100, widths 3–64). There
OpenBLAS's Haswell sgemm (which Zen cores run too) reaches ~65% of a core's FMA peak: packing and
driver costs are a large part of a 10 µs product. These kernels keep a tile of C in ``<8 x float>``
registers over the whole K loop (``llvm.fma.v8f32``, A elements broadcast, B rows loaded as
vectors), with no packing: ~90% of peak on a Zen 3 core for 100×64·64×64 (issue 20, NOTES.md).
Where Numba's target has AVX-512 the NN driver uses 4×64 tiles of ``<16 x float>``: the same
chains, so the same bits, at ~96% of a Zen 4 core's peak where LLVM's znver4 tuning ran the
8-wide tiles at 70–80% (the driver is chosen when the drivers are compiled).

A dense layer's other passes over its 100×64 arrays run from L2 (three of them do not fit a 32 KB
L1), so they are folded where a pass can be saved: the NN tiles' stores add the bias and apply
ReLU (:func:`matmul_bias_tiled`), and ReLU's backward computes the bias gradient in the same pass
(:func:`relu_backward_column_sums`); an input gradient's stores apply the ReLU backward of the
layer below (:func:`matmul_mask_tiled`), whose own backward then only sums columns
(:func:`column_sums`). Their float operations carry only LLVM's ``contract`` flag
(``_EXACT``), so Numba's fastmath cannot reorder them: the bits of the separate passes.

Every element of C is one K-ordered FMA chain (``c = fma(a[i, p], b[p, j], c)`` for p = 0..K-1,
from 0), except in the dot-product form for narrow outputs (8 interleaved partial sums over p,
then a pairwise sum).
Shapes and strides are read at run time; only the tile sizes are compile-time constants. Only
float32: :func:`matmul_tiled` sends other dtypes to ``np.dot``.
"""

import ctypes
import os
import traceback
from typing import Any, cast

import numpy as np
from llvmlite import binding, ir
from numba import cfunc, njit, types
from numba.core.errors import TypingError
from numba.extending import intrinsic, overload

from ...backends.cpu import JIT_FAST, JIT_FAST_INNER, vector_fma_widths

__all__ = [
    "column_sums",
    "load_drivers",
    "matmul_bias_tiled",
    "matmul_mask_tiled",
    "matmul_tiled",
    "relu_backward_column_sums",
    "transpose_tiled",
    "use_learner_threads",
]

_F32 = ir.FloatType()
_I32 = ir.IntType(32)
_I8P = ir.IntType(8).as_pointer()


#: the flags of the epilogues' float operations: Numba's fastmath gives every float operation
#: without flags all of them ("reassoc" would let LLVM reorder the column sums or fold a bias add
#: into the FMA chain); "contract" alone changes nothing here (no fmul to fuse)
_EXACT = ("contract",)


def _vector(width) -> Any:
    return ir.VectorType(_F32, width)


def _fma(builder, width=8) -> Any:
    module = builder.module
    name = f"llvm.fma.v{width}f32"
    try:
        return module.get_global(name)
    except KeyError:
        vec = _vector(width)
        return ir.Function(module, ir.FunctionType(vec, [vec, vec, vec]), name=name)


def _broadcast(builder, x, width=8) -> Any:
    vec = _vector(width)
    v = builder.insert_element(ir.Constant(vec, ir.Undefined), x, ir.Constant(_I32, 0))
    return builder.shuffle_vector(
        v, ir.Constant(vec, ir.Undefined), ir.Constant(ir.VectorType(_I32, width), [0] * width)
    )


def _shuffle(builder, x, y, mask) -> Any:
    return builder.shuffle_vector(x, y, ir.Constant(ir.VectorType(_I32, len(mask)), mask))


def _check_integers(*values) -> None:
    for value in values:
        if not isinstance(value, types.Integer):
            raise TypingError(f"tiled GEMM tiles take addresses, byte strides and indices as integers, got {value}")


def _load_v(builder, base, offset, width=8) -> Any:
    return builder.load(builder.bitcast(builder.gep(base, [offset]), _vector(width).as_pointer()), align=4)


def _store_v(builder, value, base, offset) -> None:
    builder.store(value, builder.bitcast(builder.gep(base, [offset]), value.type.as_pointer()), align=4)


def _k_loop(builder, intp, count, step, n_acc, body, width=8) -> list:
    """Emit ``for p in range(0, count, step)`` (count ≥ step) carrying ``n_acc`` <width x float>
    accumulators from zero in registers; ``body(p, accs)`` returns the updated ones. Returns the
    accumulators after the loop."""
    entry = builder.basic_block
    loop = builder.append_basic_block("k")
    done = builder.append_basic_block("k.done")
    builder.branch(loop)
    builder.position_at_end(loop)
    p = builder.phi(intp)
    p.add_incoming(ir.Constant(intp, 0), entry)
    accs = []
    for _ in range(n_acc):
        phi = builder.phi(_vector(width))
        phi.add_incoming(ir.Constant(_vector(width), None), entry)
        accs.append(phi)
    new = body(p, accs)
    p_next = builder.add(p, ir.Constant(intp, step))
    latch = builder.basic_block
    p.add_incoming(p_next, latch)
    for phi, value in zip(accs, new):
        phi.add_incoming(value, latch)
    builder.cbranch(builder.icmp_signed("<", p_next, count), loop, done)
    builder.position_at_end(done)
    return new


def _epilogue(builder, intp, accs, vectors, width, bias, relu, j_bytes, mask, mask_row, i0, rows) -> list:
    """The accumulators (rows × vectors) plus the bias row at ``bias`` if it is not 0, then
    ``v > 0 ? v : 0`` if ``relu`` is not 0 (as in ``_bias_activate_inplace``), then 0 where the
    matrix at ``mask`` (byte row stride ``mask_row``) is not > 0 if ``mask`` is not 0 (ReLU's
    backward, as in ``_activation_backward_only``): branches on the runtime flags, once per tile."""
    zero = ir.Constant(_vector(width), None)

    def when(flag, transform) -> list:
        before = builder.basic_block
        with builder.if_then(builder.icmp_unsigned("!=", flag, ir.Constant(flag.type, 0))):
            changed = transform(accs)
            inside = builder.basic_block
        merged = []
        for old, new in zip(accs, changed):
            phi = builder.phi(old.type)
            phi.add_incoming(old, before)
            phi.add_incoming(new, inside)
            merged.append(phi)
        return merged

    def add_bias(values) -> list:
        row = builder.gep(builder.inttoptr(bias, _I8P), [j_bytes])
        b = [_load_v(builder, row, ir.Constant(intp, 4 * width * v), width) for v in range(vectors)]
        return [builder.fadd(x, b[i % vectors], flags=_EXACT) for i, x in enumerate(values)]

    def rectify(values) -> list:
        return [builder.select(builder.fcmp_ordered(">", x, zero, flags=_EXACT), x, zero) for x in values]

    def apply_mask(values) -> list:
        out = []
        for r in range(rows):
            row = builder.gep(
                builder.inttoptr(mask, _I8P),
                [builder.add(builder.mul(builder.add(i0, ir.Constant(intp, r)), mask_row), j_bytes)],
            )
            for v in range(vectors):
                mv = _load_v(builder, row, ir.Constant(intp, 4 * width * v), width)
                x = values[r * vectors + v]
                out.append(builder.select(builder.fcmp_ordered(">", mv, zero, flags=_EXACT), x, zero))
        return out

    accs = when(bias, add_bias)
    accs = when(relu, rectify)
    return when(mask, apply_mask)


def _nn_tile(rows, vectors, width=8) -> Any:
    """Intrinsic ``tile(a, a_row, a_col, b, b_row, c, c_row, i0, j0, k, bias, relu, mask, mask_row)``:
    c[i0:i0+rows, j0:j0+width·vectors] = a[i0:i0+rows, :k] · b[:k, j0:j0+width·vectors] on float32
    matrices given by address and byte strides (b and c with unit column stride); k ≥ 1. Where
    ``bias`` (an address) is not 0 the bias row is added before the store, and where ``relu`` is
    not 0 negatives (and NaN) become 0: a dense layer's forward epilogue, the same operations as
    the separate pass in the same order (a fused layer saves a load and a store of its output).
    Where ``mask`` (an address, byte row stride ``mask_row``) is not 0, elements whose mask entry
    is not > 0 become 0: the ReLU backward of the layer below, in an input gradient's store.
    Scalars only, so every caller shares one compiled specialisation whatever its arrays' layouts."""

    @intrinsic
    def tile(typingctx, a, a_row, a_col, b, b_row, c, c_row, i0, j0, k, bias, relu, mask, mask_row):
        _check_integers(a, a_row, a_col, b, b_row, c, c_row, i0, j0, k, bias, relu, mask, mask_row)

        def codegen(context, builder, sig, args) -> Any:
            intp = context.get_value_type(types.intp)
            a_base, a_row, a_col = builder.inttoptr(args[0], _I8P), args[1], args[2]
            b_base, b_row = builder.inttoptr(args[3], _I8P), args[4]
            c_base, c_row = builder.inttoptr(args[5], _I8P), args[6]
            i0_, j0_, k_ = args[7], args[8], args[9]
            j_bytes = builder.mul(j0_, ir.Constant(intp, 4))
            a_rows = [
                builder.gep(a_base, [builder.mul(builder.add(i0_, ir.Constant(intp, r)), a_row)]) for r in range(rows)
            ]
            b_cols = builder.gep(b_base, [j_bytes])
            fma = _fma(builder, width)

            def body(p, accs) -> list:
                b_p = builder.gep(b_cols, [builder.mul(p, b_row)])
                b_vecs = [_load_v(builder, b_p, ir.Constant(intp, 4 * width * v), width) for v in range(vectors)]
                a_off = builder.mul(p, a_col)
                out: list = []
                for r in range(rows):
                    a_ptr = builder.bitcast(builder.gep(a_rows[r], [a_off]), _F32.as_pointer())
                    a_rp = _broadcast(builder, builder.load(a_ptr, align=4), width)
                    out.extend(builder.call(fma, [a_rp, b_vecs[v], accs[r * vectors + v]]) for v in range(vectors))
                return out

            accs = _k_loop(builder, intp, k_, 1, rows * vectors, body, width)
            accs = _epilogue(
                builder, intp, accs, vectors, width, args[10], args[11], j_bytes, args[12], args[13], i0_, rows
            )
            for r in range(rows):
                c_r = builder.gep(
                    c_base, [builder.add(builder.mul(builder.add(i0_, ir.Constant(intp, r)), c_row), j_bytes)]
                )
                for v in range(vectors):
                    _store_v(builder, accs[r * vectors + v], c_r, ir.Constant(intp, 4 * width * v))
            return context.get_dummy_value()

        return types.void(a, a_row, a_col, b, b_row, c, c_row, i0, j0, k, bias, relu, mask, mask_row), codegen

    return tile


def _sum_v8(builder, v) -> Any:
    """Pairwise sum of the 8 lanes: (l0+l4 + l2+l6) + (l1+l5 + l3+l7)."""
    s4 = builder.fadd(_shuffle(builder, v, v, [0, 1, 2, 3]), _shuffle(builder, v, v, [4, 5, 6, 7]))
    s2 = builder.fadd(_shuffle(builder, s4, s4, [0, 1]), _shuffle(builder, s4, s4, [2, 3]))
    return builder.fadd(
        builder.extract_element(s2, ir.Constant(_I32, 0)), builder.extract_element(s2, ir.Constant(_I32, 1))
    )


def _dot_tile(rows, cols) -> Any:
    """Intrinsic ``tile(a, a_row, bt, b_row, c, c_row, c_col, i0, j0, k)``: c[i0+r, j0+s] =
    a[i0+r, :k] · bt[j0+s, :k] for r < rows, s < cols (addresses and byte strides; rows of a and
    bt with unit stride), k a positive multiple of 8."""

    @intrinsic
    def tile(typingctx, a, a_row, bt, b_row, c, c_row, c_col, i0, j0, k):
        _check_integers(a, a_row, bt, b_row, c, c_row, c_col, i0, j0, k)

        def codegen(context, builder, sig, args) -> Any:
            intp = context.get_value_type(types.intp)
            a_base, a_row = builder.inttoptr(args[0], _I8P), args[1]
            b_base, b_row = builder.inttoptr(args[2], _I8P), args[3]
            c_base, c_row, c_col = builder.inttoptr(args[4], _I8P), args[5], args[6]
            i0_, j0_, k_ = args[7], args[8], args[9]
            a_rows = [
                builder.gep(a_base, [builder.mul(builder.add(i0_, ir.Constant(intp, r)), a_row)]) for r in range(rows)
            ]
            b_rows = [
                builder.gep(b_base, [builder.mul(builder.add(j0_, ir.Constant(intp, s)), b_row)]) for s in range(cols)
            ]
            fma = _fma(builder)

            def body(p, accs) -> list:
                off = builder.mul(p, ir.Constant(intp, 4))
                a_vecs = [_load_v(builder, a_rows[r], off) for r in range(rows)]
                b_vecs = [_load_v(builder, b_rows[s], off) for s in range(cols)]
                return [
                    builder.call(fma, [a_vecs[r], b_vecs[s], accs[r * cols + s]])
                    for r in range(rows)
                    for s in range(cols)
                ]

            accs = _k_loop(builder, intp, k_, 8, rows * cols, body)
            for r in range(rows):
                c_r = builder.gep(c_base, [builder.mul(builder.add(i0_, ir.Constant(intp, r)), c_row)])
                for s in range(cols):
                    ptr = builder.gep(c_r, [builder.mul(builder.add(j0_, ir.Constant(intp, s)), c_col)])
                    builder.store(
                        _sum_v8(builder, accs[r * cols + s]), builder.bitcast(ptr, _F32.as_pointer()), align=4
                    )
            return context.get_dummy_value()

        return types.void(a, a_row, bt, b_row, c, c_row, c_col, i0, j0, k), codegen

    return tile


def _relu_backward_strip(vectors) -> Any:
    """Intrinsic ``strip(p, p_row, g, g_row, d, d_row, db, m, j0)``: for the 8·vectors columns
    from j0, d = (p > 0 ? g : 0) row by row and db = Σ_rows d, accumulated in registers from +0 in
    row order (the bits of the two separate passes, in one pass over the arrays)."""

    @intrinsic
    def strip(typingctx, p, p_row, g, g_row, d, d_row, db, m, j0):
        _check_integers(p, p_row, g, g_row, d, d_row, db, m, j0)

        def codegen(context, builder, sig, args) -> Any:
            intp = context.get_value_type(types.intp)
            j_bytes = builder.mul(args[8], ir.Constant(intp, 4))
            p_base, g_base, d_base = (builder.gep(builder.inttoptr(args[i], _I8P), [j_bytes]) for i in (0, 2, 4))
            zero = ir.Constant(_vector(8), None)

            def body(i, accs) -> list:
                p_i, g_i, d_i = (builder.gep(base, [builder.mul(i, args[r])]) for base, r in
                                 ((p_base, 1), (g_base, 3), (d_base, 5)))  # fmt: skip
                out = []
                for v, acc in enumerate(accs):
                    off = ir.Constant(intp, 32 * v)
                    pv, gv = _load_v(builder, p_i, off), _load_v(builder, g_i, off)
                    dv = builder.select(builder.fcmp_ordered(">", pv, zero, flags=_EXACT), gv, zero)
                    _store_v(builder, dv, d_i, off)
                    out.append(builder.fadd(acc, dv, flags=_EXACT))
                return out

            sums = _k_loop(builder, intp, args[7], 1, vectors, body)
            db_j = builder.gep(builder.inttoptr(args[6], _I8P), [j_bytes])
            for v, total in enumerate(sums):
                _store_v(builder, total, db_j, ir.Constant(intp, 32 * v))
            return context.get_dummy_value()

        return types.void(p, p_row, g, g_row, d, d_row, db, m, j0), codegen

    return strip


_RELU_BACK_4, _RELU_BACK_1 = _relu_backward_strip(4), _relu_backward_strip(1)


@intrinsic
def _transpose_8x8(typingctx, w, w_row, wt, t_row, i0, j0):
    """wt[j0:j0+8, i0:i0+8] = w[i0:i0+8, j0:j0+8]ᵀ in registers (addresses and byte row strides,
    both with unit column stride)."""
    _check_integers(w, w_row, wt, t_row, i0, j0)

    def codegen(context, builder, sig, args) -> Any:
        intp = context.get_value_type(types.intp)
        w_base, w_row = builder.inttoptr(args[0], _I8P), args[1]
        t_base, t_row = builder.inttoptr(args[2], _I8P), args[3]
        i0_, j0_ = args[4], args[5]
        four = ir.Constant(intp, 4)
        src = builder.gep(w_base, [builder.add(builder.mul(i0_, w_row), builder.mul(j0_, four))])
        dst = builder.gep(t_base, [builder.add(builder.mul(j0_, t_row), builder.mul(i0_, four))])
        r = [_load_v(builder, src, builder.mul(ir.Constant(intp, q), w_row)) for q in range(8)]
        lo, hi = [0, 8, 1, 9, 4, 12, 5, 13], [2, 10, 3, 11, 6, 14, 7, 15]
        t = []
        for q in range(0, 8, 2):
            t += [_shuffle(builder, r[q], r[q + 1], lo), _shuffle(builder, r[q], r[q + 1], hi)]
        even, odd = [0, 1, 8, 9, 4, 5, 12, 13], [2, 3, 10, 11, 6, 7, 14, 15]
        s = []
        for q in (0, 4):
            s += [
                _shuffle(builder, t[q], t[q + 2], even),
                _shuffle(builder, t[q], t[q + 2], odd),
                _shuffle(builder, t[q + 1], t[q + 3], even),
                _shuffle(builder, t[q + 1], t[q + 3], odd),
            ]
        low, high = [0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15]
        for q in range(4):
            _store_v(builder, _shuffle(builder, s[q], s[q + 4], low), dst, builder.mul(ir.Constant(intp, q), t_row))
            _store_v(
                builder, _shuffle(builder, s[q], s[q + 4], high), dst, builder.mul(ir.Constant(intp, q + 4), t_row)
            )
        return context.get_dummy_value()

    return types.void(w, w_row, wt, t_row, i0, j0), codegen


_NN_4x2, _NN_3x2, _NN_2x2, _NN_1x2 = (_nn_tile(r, 2) for r in (4, 3, 2, 1))
_NN_4x1, _NN_3x1, _NN_2x1, _NN_1x1 = (_nn_tile(r, 1) for r in (4, 3, 2, 1))
_NN_1x8, _NN_2x4 = _nn_tile(1, 8), _nn_tile(2, 4)  # thin products: enough accumulators to hide FMA latency
# AVX-512: the same FMA chains in <16 x float> registers. LLVM tuned for znver4 schedules the
# <8 x float> tiles at ~80% of the 4×64 ones' speed (100×64·64×64 on a Zen 4 core, NOTES.md).
_W4x4, _W1x4, _W4x1, _W1x1 = _nn_tile(4, 4, 16), _nn_tile(1, 4, 16), _nn_tile(4, 1, 16), _nn_tile(1, 1, 16)
_DOT_2x4, _DOT_1x4, _DOT_8x1, _DOT_1x1 = _dot_tile(2, 4), _dot_tile(1, 4), _dot_tile(8, 1), _dot_tile(1, 1)


@njit(**JIT_FAST_INNER)
def _gemm_nn_raw(a, a_row, a_col, b, b_row, c, c_row, m, n, k, bias, relu, mask, mask_row):
    """c = a·b in 4×16 register tiles (edges 1–3 rows, 8 columns; 1×64 and 2×32 tiles for
    products of one or two rows), on addresses and byte strides: one compiled specialisation.
    ``bias``, ``relu``, ``mask`` and ``mask_row``: the tiles' epilogue (see _nn_tile; all 0 for a
    plain product)."""
    if m == 1 and n % 64 == 0:
        for j in range(0, n, 64):
            _NN_1x8(a, a_row, a_col, b, b_row, c, c_row, 0, j, k, bias, relu, mask, mask_row)
        return
    if m == 2 and n % 32 == 0:
        for j in range(0, n, 32):
            _NN_2x4(a, a_row, a_col, b, b_row, c, c_row, 0, j, k, bias, relu, mask, mask_row)
        return
    m4 = m - m % 4
    n16 = n - n % 16
    for i in range(0, m4, 4):
        for j in range(0, n16, 16):
            _NN_4x2(a, a_row, a_col, b, b_row, c, c_row, i, j, k, bias, relu, mask, mask_row)
        if n16 < n:
            _NN_4x1(a, a_row, a_col, b, b_row, c, c_row, i, n16, k, bias, relu, mask, mask_row)
    rows = m - m4
    if rows == 0:
        return
    for j in range(0, n16, 16):
        if rows == 3:
            _NN_3x2(a, a_row, a_col, b, b_row, c, c_row, m4, j, k, bias, relu, mask, mask_row)
        elif rows == 2:
            _NN_2x2(a, a_row, a_col, b, b_row, c, c_row, m4, j, k, bias, relu, mask, mask_row)
        else:
            _NN_1x2(a, a_row, a_col, b, b_row, c, c_row, m4, j, k, bias, relu, mask, mask_row)
    if n16 < n:
        if rows == 3:
            _NN_3x1(a, a_row, a_col, b, b_row, c, c_row, m4, n16, k, bias, relu, mask, mask_row)
        elif rows == 2:
            _NN_2x1(a, a_row, a_col, b, b_row, c, c_row, m4, n16, k, bias, relu, mask, mask_row)
        else:
            _NN_1x1(a, a_row, a_col, b, b_row, c, c_row, m4, n16, k, bias, relu, mask, mask_row)


@njit(**JIT_FAST_INNER)
def _gemm_nn_wide_raw(a, a_row, a_col, b, b_row, c, c_row, m, n, k, bias, relu, mask, mask_row):
    """_gemm_nn_raw in 4×64 tiles of <16 x float> (column edges 16 then 8 wide; edge rows one at a
    time): each element of c is the same FMA chain whatever its tile, so the same bits."""
    n64 = n - n % 64
    n16 = n - n % 16
    m4 = m - m % 4
    for i in range(0, m4, 4):
        for j in range(0, n64, 64):
            _W4x4(a, a_row, a_col, b, b_row, c, c_row, i, j, k, bias, relu, mask, mask_row)
        for j in range(n64, n16, 16):
            _W4x1(a, a_row, a_col, b, b_row, c, c_row, i, j, k, bias, relu, mask, mask_row)
        if n16 < n:
            _NN_4x1(a, a_row, a_col, b, b_row, c, c_row, i, n16, k, bias, relu, mask, mask_row)
    for i in range(m4, m):
        for j in range(0, n64, 64):
            _W1x4(a, a_row, a_col, b, b_row, c, c_row, i, j, k, bias, relu, mask, mask_row)
        for j in range(n64, n16, 16):
            _W1x1(a, a_row, a_col, b, b_row, c, c_row, i, j, k, bias, relu, mask, mask_row)
        if n16 < n:
            _NN_1x1(a, a_row, a_col, b, b_row, c, c_row, i, n16, k, bias, relu, mask, mask_row)


@njit(**JIT_FAST_INNER)
def _gemm_dot_raw(a, a_row, bt, b_row, c, c_row, c_col, m, n, k):
    """c = a·btᵀ as dot products of rows, on addresses and byte strides."""
    if n % 4 == 0:
        m2 = m - m % 2
        for i in range(0, m2, 2):
            for j in range(0, n, 4):
                _DOT_2x4(a, a_row, bt, b_row, c, c_row, c_col, i, j, k)
        if m2 < m:
            for j in range(0, n, 4):
                _DOT_1x4(a, a_row, bt, b_row, c, c_row, c_col, m2, j, k)
    else:
        m8 = m - m % 8
        for i in range(0, m8, 8):
            for j in range(n):
                _DOT_8x1(a, a_row, bt, b_row, c, c_row, c_col, i, j, k)
        for i in range(m8, m):
            for j in range(n):
                _DOT_1x1(a, a_row, bt, b_row, c, c_row, c_col, i, j, k)


@njit(**JIT_FAST_INNER)
def _transpose_raw(w, w_row, wt, t_row, k, n):
    for i in range(0, k - k % 8, 8):
        for j in range(0, n - n % 8, 8):
            _transpose_8x8(w, w_row, wt, t_row, i, j)


# The drivers are compiled once, as C-ABI functions, and called through a pointer cell that LLVM
# resolves by name. As jitted callees Numba linked them into every caller: each dense kernel and
# fused step re-optimised and re-emitted them (TD3's cold compile +2.5 s, issue 20). The tiles'
# arithmetic is explicit vector IR, so how often it is optimised does not change a bit. A cell
# first holds a ctypes entry that compiles the drivers (or loads them from Numba's disk cache) on
# its first call, so importing this module compiles nothing and code loaded from the disk cache
# is always callable; the CPU backend loads them when it stages a tiled product (load_drivers).
def _gemm_nn_driver(a, a_row, a_col, b, b_row, c, c_row, m, n, k, bias, relu, mask, mask_row):
    _gemm_nn_raw(a, a_row, a_col, b, b_row, c, c_row, m, n, k, bias, relu, mask, mask_row)


def _gemm_nn_wide_driver(a, a_row, a_col, b, b_row, c, c_row, m, n, k, bias, relu, mask, mask_row):
    _gemm_nn_wide_raw(a, a_row, a_col, b, b_row, c, c_row, m, n, k, bias, relu, mask, mask_row)


def _gemm_dot_driver(a, a_row, bt, b_row, c, c_row, c_col, m, n, k):
    _gemm_dot_raw(a, a_row, bt, b_row, c, c_row, c_col, m, n, k)


def _transpose_driver(w, w_row, wt, t_row, k, n):
    _transpose_raw(w, w_row, wt, t_row, k, n)


_DRIVERS: dict[str, tuple[Any, int]] = {
    "dispatchrl_gemm_nn": (_gemm_nn_driver, 14),
    "dispatchrl_gemm_dot": (_gemm_dot_driver, 10),
    "dispatchrl_transpose": (_transpose_driver, 6),
}
_CELLS: dict[str, ctypes.c_void_p] = {}  # symbol -> the address its callers call
_COMPILED: dict[str, Any] = {}  # symbol -> the compiled cfunc, once loaded


def load_drivers() -> None:
    """Compile the drivers (or load them from Numba's disk cache, ~0.3 s), point their cells at
    them, and start the learner's threads where DISPATCHRL_LEARNER_THREADS asks. Idempotent."""
    from .cpu_gemm_threads import learner_threads

    threads = learner_threads()  # a bad setting is refused before anything compiles
    _compile_drivers()
    use_learner_threads(threads)


def _compile_drivers() -> None:
    wide = 16 in vector_fma_widths()
    for symbol, (driver, n_args) in _DRIVERS.items():
        if symbol not in _COMPILED:
            if wide and driver is _gemm_nn_driver:
                driver = _gemm_nn_wide_driver
            compiled = cfunc(types.void(*(types.int64,) * n_args), cache=True, error_model="numpy")(driver)
            _COMPILED[symbol] = compiled
            _CELLS[symbol].value = compiled.address


def use_learner_threads(threads: int) -> None:
    """Split the NN products over ``threads`` threads (the caller and spinning workers; see
    cpu_gemm_threads: the same bits), or compute them on the caller alone (1). Call with the
    drivers loaded."""
    from .cpu_gemm_threads import start_workers, stop_workers

    serial = _COMPILED["dispatchrl_gemm_nn"].address
    threaded = start_workers(threads, serial) if threads > 1 else 0
    if not threaded:
        stop_workers()
    _CELLS["dispatchrl_gemm_nn"].value = threaded or serial


def _first_call_entry(symbol, n_args) -> Any:
    prototype = ctypes.CFUNCTYPE(None, *(ctypes.c_int64,) * n_args)

    def first_call(*args) -> None:  # cached code that no staging prepared: serial products
        try:
            _compile_drivers()
        except BaseException:  # ctypes would print and return: the product would be skipped
            traceback.print_exc()
            os.abort()
        prototype(cast(int, _CELLS[symbol].value))(*args)

    return prototype(first_call)


_FIRST_CALLS = {symbol: _first_call_entry(symbol, n_args) for symbol, (_, n_args) in _DRIVERS.items()}
for _symbol, _entry in _FIRST_CALLS.items():
    _CELLS[_symbol] = ctypes.c_void_p(ctypes.cast(_entry, ctypes.c_void_p).value)
    binding.add_symbol(_symbol, ctypes.addressof(_CELLS[_symbol]))


def _call_through_cell(symbol) -> Any:
    """Codegen of a void call, every argument as int64, of the function whose address is in the
    cell named ``symbol``."""

    def codegen(context, builder, sig, args) -> Any:
        i64 = ir.IntType(64)
        fnty = ir.FunctionType(ir.VoidType(), [i64] * len(args))
        try:
            cell = builder.module.get_global(symbol)
        except KeyError:
            cell = ir.GlobalVariable(builder.module, fnty.as_pointer(), symbol)
            cell.linkage = "external"
        builder.call(builder.load(cell), [context.cast(builder, v, t, types.int64) for v, t in zip(args, sig.args)])
        return context.get_dummy_value()

    return codegen


def _gemm_nn_typing(typingctx, a, a_row, a_col, b, b_row, c, c_row, m, n, k, bias, relu, mask, mask_row) -> Any:
    _check_integers(a, a_row, a_col, b, b_row, c, c_row, m, n, k, bias, relu, mask, mask_row)
    sig = types.void(a, a_row, a_col, b, b_row, c, c_row, m, n, k, bias, relu, mask, mask_row)
    return sig, _call_through_cell("dispatchrl_gemm_nn")


def _gemm_dot_typing(typingctx, a, a_row, bt, b_row, c, c_row, c_col, m, n, k) -> Any:
    _check_integers(a, a_row, bt, b_row, c, c_row, c_col, m, n, k)
    return types.void(a, a_row, bt, b_row, c, c_row, c_col, m, n, k), _call_through_cell("dispatchrl_gemm_dot")


def _transpose_typing(typingctx, w, w_row, wt, t_row, k, n) -> Any:
    _check_integers(w, w_row, wt, t_row, k, n)
    return types.void(w, w_row, wt, t_row, k, n), _call_through_cell("dispatchrl_transpose")


_gemm_nn_call: Any = intrinsic(_gemm_nn_typing)
_gemm_dot_call: Any = intrinsic(_gemm_dot_typing)
_transpose_call: Any = intrinsic(_transpose_typing)


@njit(**JIT_FAST)
def transpose_tiled(w, wt):
    """wt = wᵀ, 8×8 blocks transposed in registers, ragged edges element by element. Both need
    unit column stride; float32 only."""
    k, n = w.shape
    _transpose_call(w.ctypes.data, w.strides[0], wt.ctypes.data, wt.strides[0], k, n)
    kb, nb = k - k % 8, n - n % 8
    for j in range(n):
        for i in range(kb if j < nb else 0, k):
            wt[j, i] = w[i, j]


def matmul_tiled(a, b, c) -> None:
    """c = a·b with the register-tiled kernels where the layout allows one (float32):
    NN tiles when b and c have unit column stride and 8 | columns of c; the same on cᵀ = bᵀaᵀ when
    aᵀ and cᵀ have unit column stride and 8 | rows of c (a weight gradient with one output);
    dot products when rows of a and columns of b are contiguous and 8 | K; np.dot otherwise."""
    np.dot(a, b, c)


@overload(matmul_tiled, jit_options=dict(fastmath=True))
def _matmul_tiled_overload(a, b, c):
    if not all(isinstance(x, types.Array) and x.ndim == 2 and x.dtype == types.float32 for x in (a, b, c)):
        return lambda a, b, c: np.dot(a, b, c)

    def impl(a, b, c) -> None:
        m, n = c.shape
        k = a.shape[1]
        a_, b_, c_ = a.ctypes.data, b.ctypes.data, c.ctypes.data
        if k == 0 or m == 0 or n == 0:
            np.dot(a, b, c)
        elif b.strides[1] == 4 and c.strides[1] == 4 and n % 8 == 0:
            _gemm_nn_call(a_, a.strides[0], a.strides[1], b_, b.strides[0], c_, c.strides[0], m, n, k, 0, 0, 0, 0)
        elif a.strides[0] == 4 and c.strides[0] == 4 and m % 8 == 0:  # cᵀ = bᵀ·aᵀ
            _gemm_nn_call(b_, b.strides[1], b.strides[0], a_, a.strides[1], c_, c.strides[1], n, m, k, 0, 0, 0, 0)
        elif a.strides[1] == 4 and b.strides[0] == 4 and k % 8 == 0:
            _gemm_dot_call(a_, a.strides[0], b_, b.strides[1], c_, c.strides[0], c.strides[1], m, n, k)
        else:
            np.dot(a, b, c)

    return impl


@njit(**JIT_FAST_INNER)
def _nn_with_epilogue(a, b, c, bias, relu, mask, mask_row):
    """c = a·b through the NN driver with its epilogue arguments (see _nn_tile), where the layout
    allows the NN tiles (b and c with unit column stride, 8 | columns of c); whether it did."""
    m, n = c.shape
    k = a.shape[1]
    if k == 0 or m == 0 or n % 8 != 0 or b.strides[1] != 4 or c.strides[1] != 4:
        return False
    _gemm_nn_call(a.ctypes.data, a.strides[0], a.strides[1], b.ctypes.data, b.strides[0], c.ctypes.data,
                  c.strides[0], m, n, k, bias, relu, mask, mask_row)  # fmt: skip
    return True


def matmul_bias_tiled(a, b, c, bias, relu) -> bool:
    """c = a·b + bias, then ReLU where ``relu``, in the NN tiles' epilogue when the layout allows
    one (float32, b, c and bias with unit stride, 8 | columns of c); returns whether it did (if
    not, nothing was written)."""
    return False


@overload(matmul_bias_tiled, jit_options=dict(fastmath=True))
def _matmul_bias_tiled_overload(a, b, c, bias, relu):
    if not all(isinstance(x, types.Array) and x.dtype == types.float32 for x in (a, b, c, bias)):
        return lambda a, b, c, bias, relu: False

    def impl(a, b, c, bias, relu) -> bool:
        return bias.strides[0] == 4 and _nn_with_epilogue(a, b, c, bias.ctypes.data, 1 if relu else 0, 0, 0)

    return impl


def relu_backward_column_sums(pre, d_out, d_pre, db) -> bool:
    """ReLU's backward and the bias gradient in one pass: d_pre = (pre > 0 ? d_out : 0),
    db = column sums of d_pre (float32, unit column strides, 8 | columns, at least one row);
    returns whether it did (if not, nothing was written)."""
    return False


@overload(relu_backward_column_sums, jit_options=dict(fastmath=True))
def _relu_backward_column_sums_overload(pre, d_out, d_pre, db):
    if not all(isinstance(x, types.Array) and x.dtype == types.float32 for x in (pre, d_out, d_pre, db)):
        return lambda pre, d_out, d_pre, db: False

    def impl(pre, d_out, d_pre, db) -> bool:
        m, n = d_pre.shape
        if m == 0 or n % 8 != 0 or db.strides[0] != 4:
            return False
        if pre.strides[1] != 4 or d_out.strides[1] != 4 or d_pre.strides[1] != 4:
            return False
        args = (pre.ctypes.data, pre.strides[0], d_out.ctypes.data, d_out.strides[0], d_pre.ctypes.data,
                d_pre.strides[0], db.ctypes.data, m)  # fmt: skip
        n32 = n - n % 32
        for j in range(0, n32, 32):
            _RELU_BACK_4(*args, j)
        for j in range(n32, n, 8):
            _RELU_BACK_1(*args, j)
        return True

    return impl


def matmul_mask_tiled(a, b, c, mask) -> bool:
    """c = a·b, then 0 where ``mask`` is not > 0, in the NN tiles' epilogue when the layout allows
    one (float32, b, c and mask with unit column stride, 8 | columns of c); returns whether it did
    (if not, nothing was written)."""
    return False


@overload(matmul_mask_tiled, jit_options=dict(fastmath=True))
def _matmul_mask_tiled_overload(a, b, c, mask):
    if not all(isinstance(x, types.Array) and x.dtype == types.float32 for x in (a, b, c, mask)):
        return lambda a, b, c, mask: False

    def impl(a, b, c, mask) -> bool:
        return mask.strides[1] == 4 and _nn_with_epilogue(a, b, c, 0, 0, mask.ctypes.data, mask.strides[0])

    return impl


def _column_sums_strip(vectors) -> Any:
    """Intrinsic ``strip(d, d_row, db, m, j0)``: db[j0:j0+8·vectors] = Σ_rows d, from +0 in row
    order (the sums of :func:`relu_backward_column_sums`, without the mask)."""

    @intrinsic
    def strip(typingctx, d, d_row, db, m, j0):
        _check_integers(d, d_row, db, m, j0)

        def codegen(context, builder, sig, args) -> Any:
            intp = context.get_value_type(types.intp)
            j_bytes = builder.mul(args[4], ir.Constant(intp, 4))
            d_base = builder.gep(builder.inttoptr(args[0], _I8P), [j_bytes])

            def body(i, accs) -> list:
                d_i = builder.gep(d_base, [builder.mul(i, args[1])])
                return [builder.fadd(acc, _load_v(builder, d_i, ir.Constant(intp, 32 * v)), flags=_EXACT)
                        for v, acc in enumerate(accs)]  # fmt: skip

            sums = _k_loop(builder, intp, args[3], 1, vectors, body)
            db_j = builder.gep(builder.inttoptr(args[2], _I8P), [j_bytes])
            for v, total in enumerate(sums):
                _store_v(builder, total, db_j, ir.Constant(intp, 32 * v))
            return context.get_dummy_value()

        return types.void(d, d_row, db, m, j0), codegen

    return strip


_SUMS_4, _SUMS_1 = _column_sums_strip(4), _column_sums_strip(1)


def column_sums(d, db) -> bool:
    """db = column sums of d in row order (float32, unit column stride, 8 | columns, at least one
    row); returns whether it did."""
    return False


@overload(column_sums, jit_options=dict(fastmath=True))
def _column_sums_overload(d, db):
    if not all(isinstance(x, types.Array) and x.dtype == types.float32 for x in (d, db)):
        return lambda d, db: False

    def impl(d, db) -> bool:
        m, n = d.shape
        if m == 0 or n % 8 != 0 or db.strides[0] != 4 or d.strides[1] != 4:
            return False
        n32 = n - n % 32
        for j in range(0, n32, 32):
            _SUMS_4(d.ctypes.data, d.strides[0], db.ctypes.data, m, j)
        for j in range(n32, n, 8):
            _SUMS_1(d.ctypes.data, d.strides[0], db.ctypes.data, m, j)
        return True

    return impl
