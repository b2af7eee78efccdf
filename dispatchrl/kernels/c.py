"""C methods: each generic function emits a C99 block with its static shapes baked in as
constants, so the compiler sees every trip count and can unroll and vectorise.

A :class:`CKernel` is that block: C text over named parameters, plus the integer constants and
element type ``T`` it is specialised to. A staged step becomes one generated C function
(``dispatchrl_step``) running the blocks in order ``n`` times, built by the host compiler into a
shared library cached on disk by source hash (:mod:`.c_compiler`) and called through ctypes with
the arrays' data pointers prepared once. Called eagerly, a kernel compiles (or loads) the one-block
step for its shapes and runs it. The same blocks are what :mod:`dispatchrl.export` writes out for
microcontrollers, so C bodies use only float math when ``T`` is float (``tanh_T`` becomes
``tanhf``) and no libc beyond libm.
"""

import ctypes
import itertools
import math

import numpy as np

from ..arrays import Array
from ..devices import C, CPU
from ..errors import ConfigError
from ..staging import Below, Branch, Every, compile_step, launch
from . import api
from .c_compiler import compile_shared, load_library

__all__ = ["CKernel", "render_function", "render_invocation", "render_step", "dense_forward_kernel", "borrow_methods",
           "CTYPES"]

#: numpy dtype → C type
CTYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double",
          np.dtype(np.int32): "int32_t", np.dtype(np.int64): "int64_t",
          np.dtype(np.uint64): "uint64_t", np.dtype(np.bool_): "bool"}

#: activation(v) and its derivative given v = pre-activation, y = activation(v)
_SQRT_HALF, _INV_SQRT_2PI = "(T)0.70710678118654752", "(T)0.39894228040143268"
ACTIVATE = {"identity": "v", "relu": "(v > 0 ? v : (T)0)", "tanh": "tanh_T(v)",
            "gelu": f"(T)0.5 * v * ((T)1 + erf_T(v * {_SQRT_HALF}))"}
DERIVATIVE = {"identity": "(T)1", "relu": "(v > 0 ? (T)1 : (T)0)", "tanh": "((T)1 - y * y)",
              "gelu": f"((T)0.5 * ((T)1 + erf_T(v * {_SQRT_HALF})) + v * exp_T((T)-0.5 * v * v) * {_INV_SQRT_2PI})"}


class CKernel:
    """A block of C over ``params`` (launch arguments in order: arrays become pointers, ``const``
    unless listed in ``outputs``; numbers become ``const double``), with integer ``consts`` (the
    static shapes) as an enum and ``T`` the element type. ``helpers`` are file-level functions
    the body calls. In the body, ``name_T(`` is a libm call in T's precision."""

    __slots__ = ("name", "body", "params", "outputs", "consts", "dtype", "helpers")

    def __init__(self, name, body, params, outputs, consts, dtype, helpers=()):
        self.name = name
        self.dtype = np.dtype(dtype)
        self.body = body.strip("\n").replace("_T(", "f(" if self.dtype == np.float32 else "(")
        self.params, self.outputs = tuple(params), frozenset(outputs)
        self.consts, self.helpers = dict(consts), tuple(helpers)
        for key, value in self.consts.items():
            if not 0 <= value < 2**31:
                raise ConfigError(f"C device: {name} constant {key}={value} does not fit a C int")

    def __call__(self, *raw):
        # Eager call: the one-block step for these shapes, compiled once per process (and disk).
        source, arrays = render_step([(self, raw)])
        _step_function(source)(1, _pointers(arrays))

    def __repr__(self):
        return f"<CKernel {self.name} {self.consts}>"


def _literal(value):
    if isinstance(value, (bool, np.bool_, int, np.integer)):
        return str(int(value))
    value = float(value)
    if math.isnan(value):
        return "NAN"
    if math.isinf(value):
        return "INFINITY" if value > 0 else "-INFINITY"
    return repr(value)


def _disjoint(arrays):
    return all(not np.may_share_memory(a, b) for a, b in itertools.combinations(arrays, 2))


def render_function(kernel, args, name):
    """``kernel`` specialised to ``args`` as ``static void name(pointers...)``: restrict-qualified
    parameters (compilers trust restrict on parameters, not on block-scope pointers) unless two
    arguments overlap; numbers become constants."""
    if len(args) != len(kernel.params):
        raise ConfigError(f"C kernel {kernel.name} takes {kernel.params}, got {len(args)} arguments")
    arrays = [a for a in args if isinstance(a, np.ndarray)]
    restrict = "restrict " if _disjoint(arrays) else ""
    params, lines = [], []
    if kernel.consts:
        lines.append("enum { " + ", ".join(f"{k} = {v}" for k, v in kernel.consts.items()) + " };")
    lines.append(f"typedef {CTYPES[kernel.dtype]} T;")
    for param, arg in zip(kernel.params, args):
        if isinstance(arg, np.ndarray):
            const = "" if param in kernel.outputs else "const "
            params.append(f"{const}{CTYPES[arg.dtype]} *{restrict}{param}")
        else:
            lines.append(f"const double {param} = {_literal(arg)};")
    lines += kernel.body.splitlines()
    return "\n".join([f"/* {kernel.name} */", f"static void {name}({', '.join(params) or 'void'})", "{",
                      *("    " + line if line else "" for line in lines), "}", ""])


def render_invocation(name, args, name_of):
    """The call of a function from :func:`render_function`; ``name_of(array)`` is its C name."""
    return f"{name}({', '.join(name_of(a) for a in args if isinstance(a, np.ndarray))});"


HEADER = """\
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
"""


#: The step runs with denormals flushed to zero, as fused CPU steps do (kernels/cpu.py) and as
#: -ffast-math builds do: Adam's second moments of tiny gradients otherwise go denormal and every
#: operation on them takes a slow microcode path. The caller's floating-point mode is restored.
FLUSH_DENORMALS = """\
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define DISPATCHRL_FLUSH_ENTER const unsigned int dispatchrl_csr = _mm_getcsr(); _mm_setcsr(dispatchrl_csr | 0x8040u);
#define DISPATCHRL_FLUSH_EXIT _mm_setcsr(dispatchrl_csr);
#else
#define DISPATCHRL_FLUSH_ENTER
#define DISPATCHRL_FLUSH_EXIT
#endif
"""


def render_step(calls):
    """C source of one fused step over ``calls`` [(CKernel, args)] and staged branches (whose
    kernels are all CKernels, see :func:`renders_in_c`), and its arrays in parameter order:
    ``void dispatchrl_step(int64_t n, void *const *arrays)`` calling one static function per
    distinct specialised kernel (inlined by the compiler); a branch becomes an ``if`` on its
    counter, tested every time round the loop."""
    names, arrays, helpers, functions = {}, [], {}, {}

    def name_of(a):
        if id(a) not in names:
            names[id(a)] = f"a{len(arrays)}"
            arrays.append(a)
        return names[id(a)]

    def render(nodes, indent):
        lines = []
        for node in nodes:
            if isinstance(node, Branch):
                lines.append(f"{indent}if ({_condition(node.condition, name_of(_raw(node.condition.counter)))}) {{")
                lines += render(node.then, indent + "    ")
                if node.otherwise:
                    lines.append(f"{indent}}} else {{")
                    lines += render(node.otherwise, indent + "    ")
                lines.append(f"{indent}}}")
                continue
            kernel, args = node
            args = [_raw(a) for a in args]
            helpers.update(dict.fromkeys(kernel.helpers))
            for a in args:
                if isinstance(a, np.ndarray):
                    name_of(a)
            text = render_function(kernel, args, "@NAME")
            name = functions.setdefault(text, f"k{len(functions)}")
            lines.append(indent + render_invocation(name, args, lambda a: names[id(a)]))
        return lines

    body = render(calls, "        ")
    pointers = [f"    {CTYPES[a.dtype]} *const a{i} = ({CTYPES[a.dtype]} *)arrays[{i}];"
                for i, a in enumerate(arrays)]
    source = "\n".join([
        "/* generated by dispatchrl.kernels.c: one fused step, do not edit */",
        HEADER, *helpers,
        *(text.replace("@NAME", name) for text, name in functions.items()),
        FLUSH_DENORMALS,
        "void dispatchrl_step(int64_t n, void *const *arrays)",
        "{",
        *pointers,
        "    DISPATCHRL_FLUSH_ENTER",
        "    for (int64_t step = 0; step < n; step++) {",
        *body,
        "    }",
        "    DISPATCHRL_FLUSH_EXIT",
        "}",
        "",
    ])
    return source, arrays


def _condition(condition, counter):
    """A staged condition as a C expression over the int64 counter array ``counter`` (Python's
    floored ``%``, so a negative counter tests as on the other devices)."""
    if type(condition) is Every:
        p = condition.period  # at most 2**62 (renders_in_c): c % p + p cannot overflow
        return f"(({counter}[0] % INT64_C({p})) + INT64_C({p})) % INT64_C({p}) == {condition.offset}"
    if type(condition) is Below:
        limit = condition.limit
        if not -2**63 < limit < 2**63:  # beyond int64: always or never
            return "1" if limit > 0 else "0"
        return f"{counter}[0] < INT64_C({limit})"
    raise ConfigError(f"C device: cannot render a {type(condition).__name__} condition in C")


def renders_in_c(nodes):
    """Whether ``nodes`` (recorded calls and branches) can become one C function: every kernel a
    CKernel, every condition an Every or Below on an int64 counter."""
    for node in nodes:
        if isinstance(node, Branch):
            if (type(node.condition) not in (Every, Below) or _raw(node.condition.counter).dtype != np.int64
                    or getattr(node.condition, "period", 1) > 2**62):
                return False
            if not (renders_in_c(node.then) and renders_in_c(node.otherwise)):
                return False
        elif not isinstance(node[0], CKernel):
            return False
    return True


_functions = {}


def _step_function(source):
    if source not in _functions:
        fn = load_library(compile_shared(source)).dispatchrl_step
        fn.argtypes, fn.restype = (ctypes.c_int64, ctypes.POINTER(ctypes.c_void_p)), None
        _functions[source] = fn
    return _functions[source]


def _pointers(arrays):
    return (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])


def _raw(x):
    return x.data if isinstance(x, Array) else x


def _c_segment(calls):
    source, arrays = render_step(calls)
    fn, pointers = _step_function(source), _pointers(arrays)

    def run(n):
        fn(n, pointers)  # `pointers` keeps the arrays' addresses; the closure keeps them alive

    run.source, run.arrays = source, arrays
    return run


@compile_step.dispatch
def compile_step(device: C, calls: list):
    return _program(calls)


def _program(nodes):
    """One C function when everything renders in C (branches included). Otherwise a Python loop
    over segments: runs of C nodes become C functions, runs of host kernels borrowed from another
    device (see borrow_methods) run as the CPU device runs them, and a branch containing host
    kernels tests its condition from Python, each time round, before running its side's program."""
    if renders_in_c(nodes):
        return _c_segment(nodes)

    def kind(node):
        if renders_in_c([node]):
            return "c"
        return "branch" if isinstance(node, Branch) else "host"

    segments = []
    for key, group in itertools.groupby(nodes, key=kind):
        group = list(group)
        if key == "c":
            segments.append(_c_segment(group))
        elif key == "host":
            segments.append(compile_step(CPU(), group))
        else:
            segments += [_python_branch(node) for node in group]

    def run(n):
        for _ in range(n):
            for segment in segments:
                segment(1)

    run.segments = segments
    return run


def _python_branch(node):
    counter, holds = _raw(node.condition.counter), node.condition.holds
    then = _program(node.then) if node.then else None
    otherwise = _program(node.otherwise) if node.otherwise else None

    def run(n):
        for _ in range(n):
            side = then if holds(int(counter[0])) else otherwise
            if side is not None:
                side(1)

    return run


def borrow_methods(*functions, source=CPU()):
    """Let the C device run ``functions`` with ``source``'s methods until they get C ones.

    C arrays are host numpy arrays, so host kernels work on them unchanged; a fused step then
    alternates C segments with them. Borrowed methods have lower precedence, so a real C method
    registered later wins."""
    for fn in functions:
        def method(device: C, *args, _fn=fn):
            _fn.function.invoke(type(source), *map(type, args))(device, *args)

        fn.dispatch(method, precedence=-1)


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
        launch(device, CKernel(activation, body, ("x", "out"), ("out",), {"SIZE": x.size}, x.dtype),
               x, out)

    return method


for _fn in (api.identity, api.relu, api.tanh, api.gelu):
    _fn.dispatch(_activation_method(_fn.__name__))

MATMUL = """
for (int i = 0; i < M; i++) {
    for (int j = 0; j < N; j++) out[i * N + j] = 0;
    for (int p = 0; p < K; p++) {
        const T aip = a[i * K + p];
        for (int j = 0; j < N; j++) out[i * N + j] += aip * b[p * N + j];
    }
}
"""


@api.matmul.dispatch
def matmul(device: C, a, b, out):
    (m, k), n = a.shape, b.shape[1]
    launch(device, CKernel("matmul", MATMUL, ("a", "b", "out"), ("out",), dict(M=m, K=k, N=n), a.dtype),
           a, b, out)


DENSE_FORWARD = """
for (int i = 0; i < M; i++) {
    for (int j = 0; j < N; j++) pre[i * N + j] = b[j];
    for (int p = 0; p < K; p++) {
        const T xip = x[i * K + p];
        for (int j = 0; j < N; j++) pre[i * N + j] += xip * W[p * N + j];
    }
    for (int j = 0; j < N; j++) {
        const T v = pre[i * N + j];
        out[i * N + j] = @ACTIVATE;
    }
}
"""


def dense_forward_kernel(batch, n_in, n_out, activation, dtype):
    """The C block of ``dense_forward`` over (x, W, b, pre, out); also used by the export."""
    return CKernel(f"dense_forward {activation}", DENSE_FORWARD.replace("@ACTIVATE", ACTIVATE[activation]),
                   ("x", "W", "b", "pre", "out"), ("pre", "out"), dict(M=batch, K=n_in, N=n_out), dtype)


@api.dense_forward.dispatch
def dense_forward(device: C, x, W, b, pre, out, activation):
    launch(device, dense_forward_kernel(*x.shape, W.shape[1], activation, x.dtype), x, W, b, pre, out)


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
for (int p = 0; p < K * N; p++) dW[p] = 0;
for (int i = 0; i < M; i++) {
    for (int p = 0; p < K; p++) {
        const T xip = x[i * K + p];
        for (int j = 0; j < N; j++) dW[p * N + j] += xip * d_pre[i * N + j];
    }
}
"""

INPUT_GRADIENT = """
for (int i = 0; i < M; i++) {
    for (int p = 0; p < K; p++) {
        T acc = 0;
        #pragma omp simd reduction(+:acc)
        for (int j = 0; j < N; j++) acc += d_pre[i * N + j] * W[p * N + j];
        d_x[i * K + p] = acc;
    }
}
"""


@api.dense_backward.dispatch
def dense_backward(device: C, x, W, pre, out, d_out, d_pre, dW, db, d_x, activation):
    body = DENSE_BACKWARD.replace("@DERIVATIVE", DERIVATIVE[activation])
    params, outputs = ["x", "W", "pre", "out", "d_out", "d_pre", "dW", "db"], ["d_pre", "dW", "db"]
    args = [x, W, pre, out, d_out, d_pre, dW, db]
    if d_x is not None:
        body, params, outputs, args = body + INPUT_GRADIENT, params + ["d_x"], outputs + ["d_x"], args + [d_x]
    kernel = CKernel(f"dense_backward {activation}", body, params, outputs,
                     dict(M=x.shape[0], K=x.shape[1], N=W.shape[1]), x.dtype)
    launch(device, kernel, *args)


ACTIVATION_GRADIENT = """
for (int i = 0; i < M * N; i++) {
    const T v = pre[i], y = out[i];
    d_pre[i] = d_out[i] * @DERIVATIVE;
}
"""


@api.dense_input_gradient.dispatch
def dense_input_gradient(device: C, W, pre, out, d_out, d_pre, d_x, activation):
    body = ACTIVATION_GRADIENT.replace("@DERIVATIVE", DERIVATIVE[activation]) + INPUT_GRADIENT
    kernel = CKernel(f"dense_input_gradient {activation}", body, ("W", "pre", "out", "d_out", "d_pre", "d_x"),
                     ("d_pre", "d_x"), dict(M=pre.shape[0], K=W.shape[0], N=W.shape[1]), W.dtype)
    launch(device, kernel, W, pre, out, d_out, d_pre, d_x)


# --- losses and optimisers ---------------------------------------------------------------------

MSE_LOSS = """
double acc = 0;
#pragma omp simd reduction(+:acc)
for (int i = 0; i < SIZE; i++) {
    const double d = (double)pred[i] - (double)target[i];
    acc += d * d;
}
loss[0] = (T)(acc / SIZE);
"""


@api.mse_loss.dispatch
def mse_loss(device: C, pred, target, loss):
    launch(device, CKernel("mse_loss", MSE_LOSS, ("pred", "target", "loss"), ("loss",),
                           {"SIZE": pred.size}, pred.dtype), pred, target, loss)


MSE_GRADIENT = """
for (int i = 0; i < SIZE; i++) d_pred[i] = (T)((double)(pred[i] - target[i]) * (2.0 / SIZE));
"""


@api.mse_gradient.dispatch
def mse_gradient(device: C, pred, target, d_pred):
    launch(device, CKernel("mse_gradient", MSE_GRADIENT, ("pred", "target", "d_pred"), ("d_pred",),
                           {"SIZE": pred.size}, pred.dtype), pred, target, d_pred)


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


@api.adam_step.dispatch
def adam_step(device: C, param, grad, m, v, t, lr, beta1, beta2, eps):
    kernel = CKernel("adam_step", ADAM_STEP,
                     ("param", "grad", "m", "v", "t", "lr", "beta1", "beta2", "eps"),
                     ("param", "m", "v", "t"), {"SIZE": param.size}, param.dtype)
    launch(device, kernel, param, grad, m, v, t, lr, beta1, beta2, eps)


POLYAK_UPDATE = """
for (int i = 0; i < SIZE; i++) target[i] = (T)(polyak * target[i] + (1.0 - polyak) * source[i]);
"""


@api.polyak_update.dispatch
def polyak_update(device: C, target, source, polyak):
    launch(device, CKernel("polyak_update", POLYAK_UPDATE, ("target", "source", "polyak"), ("target",),
                           {"SIZE": target.size}, target.dtype), target, source, polyak)


FILL = "for (int i = 0; i < SIZE; i++) out[i] = (T)value;"


@api.fill.dispatch
def fill(device: C, out, value):
    launch(device, CKernel("fill", FILL, ("out", "value"), ("out",), {"SIZE": out.size}, out.dtype),
           out, value)


COPY = "for (int i = 0; i < SIZE; i++) dst[i] = src[i];"


@api.copy.dispatch
def copy(device: C, src, dst):
    launch(device, CKernel("copy", COPY, ("src", "dst"), ("dst",), {"SIZE": src.size}, src.dtype),
           src, dst)


# --- random numbers: the counter-based SplitMix64 stream of kernels/generic.py ------------------

UNIFORM01 = """\
/* stream position -> uniform in [0, 1): SplitMix64, the same numbers as kernels/generic.py */
static inline double dispatchrl_uniform01(uint64_t key, uint64_t counter)
{
    uint64_t z = key + (counter + 1) * UINT64_C(0x9E3779B97F4A7C15);
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}
"""

RANDOM_UNIFORM = """
const uint64_t key = rng[0], base = rng[1];
for (int i = 0; i < SIZE; i++) out[i] = (T)(low + (high - low) * dispatchrl_uniform01(key, base + (uint64_t)i));
rng[1] = base + SIZE;
"""


@api.random_uniform.dispatch
def random_uniform(device: C, rng, out, low, high):
    launch(device, CKernel("random_uniform", RANDOM_UNIFORM, ("rng", "out", "low", "high"), ("rng", "out"),
                           {"SIZE": out.size}, out.dtype, (UNIFORM01,)), rng, out, low, high)


RANDOM_NORMAL = """
const uint64_t key = rng[0], base = rng[1];
for (int i = 0; i < SIZE; i++) {
    const double u1 = dispatchrl_uniform01(key, base + 2 * (uint64_t)i);
    const double u2 = dispatchrl_uniform01(key, base + 2 * (uint64_t)i + 1);
    out[i] = (T)(mean + std * sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2));
}
rng[1] = base + 2 * (uint64_t)SIZE;
"""


@api.random_normal.dispatch
def random_normal(device: C, rng, out, mean, std):
    launch(device, CKernel("random_normal", RANDOM_NORMAL, ("rng", "out", "mean", "std"), ("rng", "out"),
                           {"SIZE": out.size}, out.dtype, (UNIFORM01,)), rng, out, mean, std)


INCREMENT = "counter[0] += (int64_t)amount;"


@api.increment.dispatch
def increment(device: C, counter, amount):
    launch(device, CKernel("increment", INCREMENT, ("counter", "amount"), ("counter",), {}, counter.dtype),
           counter, amount)
