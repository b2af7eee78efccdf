"""C methods of the core generic functions: each emits a C99 block (a
:class:`~dispatchrl.backends.c.CKernel`) with its static shapes baked in as constants, so the
compiler sees every trip count and can unroll and vectorise. A staged step becomes one generated C
function (:mod:`dispatchrl.backends.c`); called eagerly, a kernel compiles (or loads) the one-block
step for its shapes and runs it."""

import numpy as np

from ...activation import Activation
from ...arrays import Array
from ...backends.c import CKernel, axes, c_method
from ...devices import C
from ...staging import launch
from . import api

__all__ = [
    "ACTIVATE",
    "DERIVATIVE",
    "blocked_product",
    "dense_forward_body",
    "dense_forward_kernel",
    "input_gradient_body",
    "weight_gradient_body",
]

#: activation(v) and its derivative given v = pre-activation, y = activation(v)
_SQRT_HALF, _INV_SQRT_2PI = f"(T){api.SQRT_HALF!r}", f"(T){api.INV_SQRT_2PI!r}"
ACTIVATE = {
    Activation.IDENTITY: "v",
    Activation.RELU: "(v > 0 ? v : (T)0)",
    Activation.TANH: "tanh_T(v)",
    Activation.GELU: f"(T)0.5 * v * ((T)1 + erf_T(v * {_SQRT_HALF}))",
}
DERIVATIVE = {
    Activation.IDENTITY: "(T)1",
    Activation.RELU: "(v > 0 ? (T)1 : (T)0)",
    Activation.TANH: "((T)1 - y * y)",
    Activation.GELU: f"((T)0.5 * ((T)1 + erf_T(v * {_SQRT_HALF})) + v * exp_T((T)-0.5 * v * v) * {_INV_SQRT_2PI})",
}


# --- elementwise and matrix kernels ------------------------------------------------------------

ELEMENTWISE = """
for (int i = 0; i < SIZE; i++) {
    const T v = x[i];
    out[i] = @ACTIVATE;
}
"""


def _activation_method(activation):
    def method(device: C, x, out):
        body = ELEMENTWISE.replace("@ACTIVATE", ACTIVATE[activation])
        kernel = CKernel(activation.label, body, ("x", "out"), ("out",), {"SIZE": x.size}, x.dtype, overwrites=("out",))
        launch(device, kernel, x, out)

    return method


api.register_activation_methods(_activation_method)


#: bytes of a vector in the blocked products (AVX2; NEON compiles it as two registers)
VECTOR_BYTES = 32
#: register tile: rows × (vectors per row) accumulators
TILE_ROWS, TILE_VECTORS = 4, 2
#: WebAssembly SIMD128's tile: 4 rows × 2 vectors of 16 bytes (8 accumulators). The AVX2 tile
#: compiles there as 16 v128 accumulators, more than V8's ~14 allocatable XMM registers hold with
#: the loads and the broadcast: spilled, it ran the products ~1.5x slower than this one
WASM_VECTOR_BYTES, WASM_TILE_ROWS, WASM_TILE_VECTORS = 16, 4, 2
_GNU = "(defined(__GNUC__) || defined(__clang__))"
#: tiles where the compiler has vector extensions and the target SIMD registers to hold them;
#: elsewhere (Cortex-M, RISC-V without V, WebAssembly without SIMD128) the plain loops are smaller
#: and as fast, and give the same bits
_WASM_VECTORS = f"#if {_GNU} && defined(__wasm_simd128__)"
_NATIVE_VECTORS = f"#elif {_GNU} && (defined(__SSE2__) || defined(__ARM_NEON))"
#: before a loop ``out[i] = f(pre[i])`` whose ``out`` may be ``pre`` itself (in-place activations):
#: Clang's runtime overlap check fails for equal pointers and runs the scalar loop; each element
#: is read before it is written, so vectors are safe for the same or disjoint arrays (these are
#: whole same-shaped arrays: never partly overlapping). Under V8 the scalar relu after the K=4
#: critic layer took ~6x that layer's native time.
SAME_INDEX_LOOP = "#if defined(__clang__)\n#pragma clang loop vectorize(assume_safety)\n#endif\n"


def blocked_product(
    rows: int,
    cols: int,
    depth: int,
    a: str,
    b: tuple[str, str],
    init: str | None,
    dests: tuple[tuple[str, str], ...],
    post: str = "",
    itemsize: int = 4,
) -> str:
    """C for ``out[i, j] = init[j] + Σ_p a(i, p) · b[p · stride + j]`` (``init`` None: from 0)
    over a rows × cols output, the sum over p = 0, 1, …, depth − 1 in order, stored to every
    ``(base, stride)`` of ``dests``; then ``post`` runs per element with ``row`` and ``col``.

    With GCC or Clang on a SIMD target the loops are blocked into register tiles over the
    compile-time shapes: TILE_ROWS rows × TILE_VECTORS vectors of VECTOR_BYTES (WebAssembly
    SIMD128: the WASM_ tile), unrolled here into
    named accumulators (narrower remainders as single vectors, then scalars), ``a`` broadcast,
    ``b`` loaded as vectors. Every output element is still one sequential sum in p order, each
    multiply and add rounded (``-ffp-contract=off``): the same bits as the plain loop, which
    other compilers and targets get.
    ``a`` is a template over ``@ROW`` and ``@P``."""
    plain_store = "\n".join(f"        {base}[i * {stride} + j] = acc;" for base, stride in dests)
    plain = f"""for (int i = 0; i < {rows}; i++) {{
    for (int j = 0; j < {cols}; j++) {{
        T acc = {f"{init}[j]" if init else "(T)0"};
        for (int p = 0; p < {depth}; p++) acc += {a.replace("@ROW", "i").replace("@P", "p")} * {b[0]}[p * {b[1]} + j];
{plain_store}
    }}
}}
"""
    post_loop = ""
    if post:
        post_loop = f"""for (int row = 0; row < {rows}; row++) {{
{SAME_INDEX_LOOP}    for (int col = 0; col < {cols}; col++) {{
        {post}
    }}
}}
"""
    shape = (rows, cols, depth, a, b, init, dests, itemsize)
    wasm = _tiles(*shape, WASM_VECTOR_BYTES, WASM_TILE_ROWS, WASM_TILE_VECTORS)
    native = _tiles(*shape, VECTOR_BYTES, TILE_ROWS, TILE_VECTORS)
    return f"{_WASM_VECTORS}\n{wasm}{_NATIVE_VECTORS}\n{native}#else\n{plain}#endif\n{post_loop}"


def _tiles(rows, cols, depth, a, b, init, dests, itemsize, vector_bytes, tile_rows_, tile_vectors) -> str:
    """The tiled loop nests of :func:`blocked_product` for one register tile shape: ``tile_rows_``
    rows × ``tile_vectors`` vectors of ``vector_bytes``, then narrower remainders."""
    lanes = vector_bytes // itemsize
    b_base, b_stride = b
    vector_tiles = []
    col = 0
    width = tile_vectors * lanes
    if cols // width:
        vector_tiles.append((0, cols - cols % width, tile_vectors, lanes))
        col = cols - cols % width
    if (cols - col) // lanes:
        vector_tiles.append((col, col + lanes, 1, lanes))
        col += lanes
    if cols - col:
        vector_tiles.append((col, cols, cols - col, 1))  # scalar columns
    blocks = []
    for j_lo, j_hi, nv, ln in vector_tiles:
        tile_rows = tile_rows_ if ln > 1 or nv > 2 else 2 * tile_rows_
        full_rows = rows - rows % tile_rows
        for i_lo, i_hi, tr in ((0, full_rows, tile_rows), (full_rows, rows, rows - full_rows)):
            if i_hi > i_lo:
                blocks.append(_tile(i_lo, i_hi, tr, j_lo, j_hi, nv, ln, depth, a, b_base, b_stride, init, dests))
    uses_vectors = any(ln > 1 for _, _, _, ln in vector_tiles)
    vector_type = f"typedef T VT __attribute__((vector_size({vector_bytes})));" if uses_vectors else ""
    return f"{{\n{vector_type}\n{''.join(blocks)}}}\n"


def _tile(i_lo, i_hi, tr, j_lo, j_hi, nv, ln, depth, a, b_base, b_stride, init, dests) -> str:
    """One tile loop nest: tr rows × nv accumulators of ln lanes (ln = 1: scalars)."""
    vt = "VT" if ln > 1 else "T"
    accs = [[f"acc{r}_{v}" for v in range(nv)] for r in range(tr)]
    lines = [
        f"for (int i0 = {i_lo}; i0 < {i_hi}; i0 += {tr}) {{",
        f"    for (int j0 = {j_lo}; j0 < {j_hi}; j0 += {nv * ln}) {{",
    ]

    def load(name: str, pointer: str) -> str:
        return f"{name} = *({pointer});" if ln == 1 else f"__builtin_memcpy(&{name}, {pointer}, sizeof({name}));"

    if init:
        lines.append(f"        {vt} " + ", ".join(f"init{v}" for v in range(nv)) + ";")
        lines += [f"        {load(f'init{v}', f'{init} + j0 + {v * ln}')}" for v in range(nv)]
        lines.append(
            f"        {vt} " + ", ".join(f"{accs[r][v]} = init{v}" for r in range(tr) for v in range(nv)) + ";"
        )
    else:
        zero = "{0}" if ln > 1 else "0"
        lines.append(f"        {vt} " + ", ".join(f"{accs[r][v]} = {zero}" for r in range(tr) for v in range(nv)) + ";")
    lines.append(f"        for (int p = 0; p < {depth}; p++) {{")
    lines.append(f"            {vt} " + ", ".join(f"w{v}" for v in range(nv)) + ";")
    lines += [f"            {load(f'w{v}', f'{b_base} + p * {b_stride} + j0 + {v * ln}')}" for v in range(nv)]
    for r in range(tr):
        scalar = a.replace("@ROW", f"(i0 + {r})").replace("@P", "p")
        updates = " ".join(f"{accs[r][v]} += s * w{v};" for v in range(nv))
        lines.append(f"            {{ const T s = {scalar}; {updates} }}")
    lines.append("        }")
    for base, stride in dests:
        for r in range(tr):
            for v in range(nv):
                pointer = f"{base} + (i0 + {r}) * {stride} + j0 + {v * ln}"
                if ln > 1:
                    lines.append(f"        __builtin_memcpy({pointer}, &{accs[r][v]}, sizeof({accs[r][v]}));")
                else:
                    lines.append(f"        *({pointer}) = {accs[r][v]};")
    lines += ["    }", "}", ""]
    return "\n".join(lines)


@api.matmul.dispatch
def matmul(device: C, a, b, out):
    (m, k), n = a.shape, b.shape[1]
    body = blocked_product(m, n, k, "a[@ROW * K + @P]", ("b", "N"), None, (("out", "N"),), itemsize=a.dtype.itemsize)
    kernel = CKernel("matmul", body, ("a", "b", "out"), ("out",), dict(M=m, K=k, N=n), a.dtype, overwrites=("out",))
    launch(device, kernel, a, b, out)


def dense_forward_body(batch: int, n_in: int, n_out: int, activation: Activation, itemsize: int) -> str:
    """pre = x W + b (each sum from b[j] over p in order), then out = activation(pre)."""
    post = f"const T v = pre[row * N + col];\n        out[row * N + col] = {ACTIVATE[activation]};"
    return blocked_product(batch, n_out, n_in, "x[@ROW * K + @P]", ("W", "N"), "b", (("pre", "N"),), post, itemsize)


def dense_forward_kernel(batch, n_in, n_out, activation, dtype):
    """The C block of ``dense_forward`` over (x, W, b, pre, out); also used by the export."""
    activation = Activation.of(activation, "dense_forward_kernel")
    return CKernel(
        f"dense_forward {activation.label}",
        dense_forward_body(batch, n_in, n_out, activation, np.dtype(dtype).itemsize),
        ("x", "W", "b", "pre", "out"),
        ("pre", "out"),
        dict(M=batch, K=n_in, N=n_out),
        dtype,
        overwrites=("pre", "out"),
    )


@api.dense_forward.dispatch
def dense_forward(device: C, x, W, b, pre, out, activation):
    batch, n_in = x.shape
    launch(device, dense_forward_kernel(batch, n_in, W.shape[1], activation, x.dtype), x, W, b, pre, out)


DENSE_BACKWARD = """
for (int j = 0; j < N; j++) db[j] = 0;
for (int i = 0; i < M; i++) {
    for (int j = 0; j < N; j++) {
        const T v = pre[i * N + j], y = out[i * N + j];
        const T g = d_out[i * N + j] * @DERIVATIVE;
        d_pre[i * N + j] = g;
        db[j] += g;
    }
}
"""


def weight_gradient_body(batch: int, n_in: int, n_out: int, itemsize: int) -> str:
    """dW[p, j] = Σ_i x[i, p] d_pre[i, j], summed over the batch rows i in order from 0.

    With fewer outputs than a vector has lanes (a value head, a 1-D action's mean) the tiles run
    along the inputs instead: dWᵀ = d_preᵀ x into scratch, then transposed into dW. Each element
    is the same sum in the same order (x · d is d · x exactly), so the same bits; the tiles along
    one or two output columns were scalar and ran ~20x slower (PPO's heads: 85 µs a call)."""
    if n_out < VECTOR_BYTES // itemsize <= n_in:
        product = blocked_product(
            n_out, n_in, batch, "d_pre[@P * N + @ROW]", ("x", "K"), None, (("dWT", "K"),), "", itemsize
        )
        return f"""{{
    static T dWT[N * K];
{product}    for (int p = 0; p < K; p++)
        for (int j = 0; j < N; j++) dW[p * N + j] = dWT[j * K + p];
}}
"""
    return blocked_product(n_in, n_out, batch, "x[@P * K + @ROW]", ("d_pre", "N"), None, (("dW", "N"),), "", itemsize)


def input_gradient_body(batch: int, n_in: int, n_out: int, itemsize: int) -> str:
    """d_x[i, p] = Σ_j d_pre[i, j] W[p, j], summed over j in order from 0 (no reassociation: the
    same bits on every target); W transposed once into scratch so a tile's loads are contiguous."""
    product = blocked_product(
        batch, n_in, n_out, "d_pre[@ROW * N + @P]", ("WT", "K"), None, (("d_x", "K"),), "", itemsize
    )
    return f"""{{
    static T WT[N * K];
    for (int p = 0; p < K; p++)
        for (int j = 0; j < N; j++) WT[j * K + p] = W[p * N + j];
{product}}}
"""


@api.dense_backward.dispatch
def dense_backward(device: C, x, W, pre, out, d_out, d_pre, dW, db, d_x, activation):
    (batch, n_in), n_out = x.shape, W.shape[1]
    body = DENSE_BACKWARD.replace("@DERIVATIVE", DERIVATIVE[activation]) + weight_gradient_body(
        batch, n_in, n_out, x.dtype.itemsize
    )
    params, outputs = ["x", "W", "pre", "out", "d_out", "d_pre", "dW", "db"], ["d_pre", "dW", "db"]
    args = [x, W, pre, out, d_out, d_pre, dW, db]
    if d_x is not None:
        body += input_gradient_body(batch, n_in, n_out, x.dtype.itemsize)
        params, outputs, args = params + ["d_x"], outputs + ["d_x"], args + [d_x]
    kernel = CKernel(
        f"dense_backward {activation.label}",
        body,
        params,
        outputs,
        dict(M=x.shape[0], K=x.shape[1], N=W.shape[1]),
        x.dtype,
        overwrites=outputs,
    )
    launch(device, kernel, *args)


ACTIVATION_GRADIENT = """
for (int i = 0; i < M * N; i++) {
    const T v = pre[i], y = out[i];
    d_pre[i] = d_out[i] * @DERIVATIVE;
}
"""


@api.dense_input_gradient.dispatch
def dense_input_gradient(device: C, W, pre, out, d_out, d_pre, d_x, activation):
    body = ACTIVATION_GRADIENT.replace("@DERIVATIVE", DERIVATIVE[activation])
    body += input_gradient_body(pre.shape[0], W.shape[0], W.shape[1], W.dtype.itemsize)
    kernel = CKernel(
        f"dense_input_gradient {activation.label}",
        body,
        ("W", "pre", "out", "d_out", "d_pre", "d_x"),
        ("d_pre", "d_x"),
        dict(M=pre.shape[0], K=W.shape[0], N=W.shape[1]),
        W.dtype,
        overwrites=("d_pre", "d_x"),
    )
    launch(device, kernel, W, pre, out, d_out, d_pre, d_x)


# --- losses and optimisers ---------------------------------------------------------------------

MSE_LOSS = """
double acc = 0;
for (int i = 0; i < SIZE; i++) {
    const double d = (double)pred[i] - (double)target[i];
    acc += d * d;
}
loss[0] = (T)(acc / SIZE);
"""


c_method(api.mse_loss, MSE_LOSS, lambda arg: {"SIZE": arg.pred.size}, "pred")


MSE_GRADIENT = """
for (int i = 0; i < SIZE; i++) d_pred[i] = (T)((double)(pred[i] - target[i]) * (2.0 / SIZE));
"""


c_method(api.mse_gradient, MSE_GRADIENT, lambda arg: {"SIZE": arg.pred.size}, "pred")


ADAM_STEP = """
t[0] += 1;
/* bias corrections in double, the elementwise update in T (it vectorises) */
const T b1 = (T)beta1, b2 = (T)beta2, rate = (T)lr, epsilon = (T)eps;
const T scale1 = (T)(1.0 / (1.0 - pow(beta1, (double)t[0])));
const T scale2 = (T)(1.0 / (1.0 - pow(beta2, (double)t[0])));
for (int i = 0; i < SIZE; i++) {
    const T g = grad[i];
    m[i] = b1 * m[i] + ((T)1 - b1) * g;
    v[i] = b2 * v[i] + ((T)1 - b2) * g * g;
    param[i] -= rate * (m[i] * scale1) / (sqrt_T(v[i] * scale2) + epsilon);
}
"""


c_method(api.adam_step, ADAM_STEP, lambda arg: {"SIZE": arg.param.size}, "param")


@api.adam_step.dispatch
def adam_step(device: C, param, grad, m, v, t, lr: Array, beta1, beta2, eps):
    # the learning rate read from a (1,) float64 array each step (PPO's adaptive rate changes it)
    kernel = CKernel(
        "adam_step lr array",
        ADAM_STEP.replace("rate = (T)lr,", "rate = (T)lr[0],"),
        ("param", "grad", "m", "v", "t", "lr", "beta1", "beta2", "eps"),
        ("param", "m", "v", "t"),
        {"SIZE": param.size},
        param.dtype,
    )
    launch(device, kernel, param, grad, m, v, t, lr, beta1, beta2, eps)


POLYAK_UPDATE = """
for (int i = 0; i < SIZE; i++) target[i] = (T)(polyak * target[i] + (1.0 - polyak) * source[i]);
"""


c_method(api.polyak_update, POLYAK_UPDATE, lambda arg: {"SIZE": arg.target.size}, "target")


WEIGHT_DECAY_STEP = "for (int i = 0; i < SIZE; i++) param[i] -= (T)decay * param[i];"


c_method(api.weight_decay_step, WEIGHT_DECAY_STEP, lambda arg: {"SIZE": arg.param.size}, "param")


ACCUMULATE_SQUARED_NORM = """
double s = 0.0;
for (int i = 0; i < SIZE; i++) {
    const double xi = (double)x[i];
    s += xi * xi;
}
total[0] += s;
"""


c_method(api.accumulate_squared_norm, ACCUMULATE_SQUARED_NORM, lambda arg: {"SIZE": arg.x.size}, "x")


CLIP_BY_NORM = f"""
const double factor = max_norm / (sqrt(total[0]) + {api.GRAD_NORM_EPS!r});
if (factor < 1.0) {{
    const T f = (T)factor;
    for (int i = 0; i < SIZE; i++) x[i] *= f;
}}
"""


c_method(api.clip_by_norm, CLIP_BY_NORM, lambda arg: {"SIZE": arg.x.size}, "x")


LINEAR_SCHEDULE = """
const double fraction = (double)counter[0] / total;
out[0] = start + (end - start) * (fraction < 1.0 ? fraction : 1.0);
"""


c_method(api.linear_schedule, LINEAR_SCHEDULE, lambda arg: {}, "out")


FILL = "for (int i = 0; i < SIZE; i++) out[i] = (T)value;"


c_method(api.fill, FILL, lambda arg: {"SIZE": arg.out.size}, "out")


COPY = "for (int i = 0; i < SIZE; i++) dst[i] = src[i];"


c_method(api.copy, COPY, lambda arg: {"SIZE": arg.src.size}, "src")


CLIP = "for (int i = 0; i < SIZE; i++) out[i] = x[i] < (T)low ? (T)low : x[i] > (T)high ? (T)high : x[i];"


c_method(api.clip, CLIP, lambda arg: {"SIZE": arg.x.size}, "x")


ARGMAX = """
for (int i = 0; i < M; i++) {  /* the first maximum */
    int best = 0;
    for (int j = 1; j < N; j++)
        if (x[i * N + j] > x[i * N + best]) best = j;
    out[i] = (T)best;
}
"""


c_method(api.argmax, ARGMAX, axes("x", "M", "N"), "x")


INCREMENT = "counter[0] += (int64_t)amount;"


c_method(api.increment, INCREMENT, lambda arg: {}, "counter")


# x - x is 0 for finite x and NaN for NaN or inf; NaN compares unequal to itself (no libm, and
# the C device never enables fast-math, which would fold this away)
NONFINITE_FLAG = """
if (flag[0] == 0) {
    int bad = 0;
    for (int i = 0; i < SIZE; i++) {
        const T d = x[i] - x[i];
        bad |= d != d;
    }
    if (bad) flag[0] = (int64_t)code;
}
"""


c_method(api.nonfinite_flag, NONFINITE_FLAG, lambda arg: {"SIZE": arg.x.size}, "x")
