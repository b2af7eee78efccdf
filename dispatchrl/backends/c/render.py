"""C kernels and their rendering: a :class:`CKernel` is a block of C99 specialised to static
shapes; :func:`render_step` turns a traced step of them (and staged branches) into the source of one
C function, ``dispatchrl_step``, running the blocks in order ``n`` times.

The same blocks are what :mod:`dispatchrl.export` writes out for microcontrollers, so C bodies use
only float math when ``T`` is float (``tanh_T`` becomes ``tanhf``) and no libc: the math
functions are the device's own (:mod:`.mathlib`), so a step gives the same bits on every target.
"""

import itertools
import math
from types import SimpleNamespace
from typing import Any

import numpy as np

from ...devices import C
from ...errors import ConfigError
from ...staging import Below, Branch, Every, launch, raw
from .compiler import array_pointers, step_function
from .mathlib import MATH

__all__ = [
    "CTYPES",
    "FLUSH_DENORMALS",
    "HEADER",
    "CKernel",
    "axes",
    "c_method",
    "condition_expression",
    "render_function",
    "render_invocation",
    "render_step",
    "renders_in_c",
]

#: numpy dtype → C type
CTYPES = {
    np.dtype(np.float32): "float",
    np.dtype(np.float64): "double",
    np.dtype(np.int32): "int32_t",
    np.dtype(np.int64): "int64_t",
    np.dtype(np.uint64): "uint64_t",
    np.dtype(np.bool_): "bool",
}


class CKernel:
    """A block of C over ``params`` (launch arguments in order: arrays become pointers, ``const``
    unless listed in ``outputs``; numbers become ``const double``), with integer ``consts`` (the
    static shapes) as an enum and ``T`` the element type. ``helpers`` are file-level functions
    the body calls. In the body, ``name_T(`` is a libm call in T's precision.

    ``overwrites`` names the outputs the block writes whole without reading what they held
    before: the exported trainer's liveness analysis (:mod:`dispatchrl.export.scratch`) lets
    arrays that are always overwritten before being read share memory; an output not listed is
    taken to be read-modify-write (always safe)."""

    __slots__ = ("body", "consts", "dtype", "helpers", "name", "outputs", "overwrites", "params")

    def __init__(self, name, body, params, outputs, consts, dtype, helpers=(), overwrites=()):
        self.name = name
        self.dtype = np.dtype(dtype)
        self.body = body.strip("\n").replace("_T(", "f(" if self.dtype == np.float32 else "(")
        self.params, self.outputs = tuple(params), frozenset(outputs)
        self.overwrites = frozenset(overwrites)
        if not self.overwrites <= self.outputs:
            raise ConfigError(f"C kernel {name}: overwrites {sorted(self.overwrites - self.outputs)} are not outputs")
        self.consts, self.helpers = dict(consts), tuple(helpers)
        for key, value in self.consts.items():
            if not 0 <= value < 2**31:
                raise ConfigError(f"C device: {name} constant {key}={value} does not fit a C int")

    def __call__(self, *raw) -> None:
        # Eager call: the one-block step for these shapes, compiled once per process (and disk).
        source, arrays = render_step([(self, raw)])
        step_function(source)(1, array_pointers(arrays))

    def __repr__(self):
        return f"<CKernel {self.name} {self.consts}>"


def c_method(function, body, shapes, dtype, helpers=(), constants=()) -> None:
    """Register the C method of generic ``function`` (one with no other C method): one
    :class:`CKernel` named after it, of ``body`` over the declaration's parameters, launched with
    the call's arguments in their order. What it writes is what the declaration says: its in-place
    arguments are read and written, its outputs written whole (``overwrites``). ``shapes(arg)``
    gives the integer constants from the arguments (``arg.q`` is argument ``q``); the parameters
    named in ``constants`` enter the text only that way, not as parameters. ``T`` is the element
    type of the argument named ``dtype``, or ``dtype`` itself when it is not a name."""
    if function.outputs is None:
        raise ConfigError(f"c_method {function.__name__}: the declaration names no outputs or in-place arguments")
    names, outputs = function.parameters[1:], (*function.inplace, *function.outputs)
    passed = [i for i, name in enumerate(names) if name not in constants]
    params = tuple(names[i] for i in passed)

    def method(device: C, *args) -> Any:  # Any: plum keeps caching the call (see dispatch)
        arg = SimpleNamespace(**dict(zip(names, args)))
        element = getattr(arg, dtype).dtype if isinstance(dtype, str) else dtype
        kernel = CKernel(function.__name__, body, params, outputs, shapes(arg), element, helpers, function.outputs)
        launch(device, kernel, *[args[i] for i in passed])

    function.dispatch(method)


def axes(name, *constants):
    """``shapes`` for :func:`c_method`: ``constants`` are the extents of argument ``name``'s axes,
    in order (``axes("q", "B", "K")``: B rows, K columns)."""
    return lambda arg: dict(zip(constants, getattr(arg, name).shape))


def _literal(value):
    if isinstance(value, (bool, np.bool_, int, np.integer)):
        return str(int(value))
    value = float(value)
    if math.isnan(value):
        return "NAN"
    if math.isinf(value):
        return "INFINITY" if value > 0 else "-INFINITY"
    return repr(value)


def _overlapping(arrays):
    """Indices of the arrays that share memory with another one of ``arrays``."""
    return {
        k
        for (i, a), (j, b) in itertools.combinations(enumerate(arrays), 2)
        if np.may_share_memory(a, b)
        for k in (i, j)
    }


def render_function(kernel, args, name):
    """``kernel`` specialised to ``args`` as ``static void name(pointers...)``: restrict-qualified
    parameters (compilers trust restrict on parameters, not on block-scope pointers), except those
    whose argument overlaps another one (an in-place activation's ``pre`` and ``out``); numbers
    become constants."""
    if len(args) != len(kernel.params):
        raise ConfigError(f"C kernel {kernel.name} takes {kernel.params}, got {len(args)} arguments")
    arrays = [a for a in args if isinstance(a, np.ndarray)]
    aliased = {id(arrays[i]) for i in _overlapping(arrays)}
    params, lines = [], []
    if kernel.consts:
        lines.append("enum { " + ", ".join(f"{k} = {v}" for k, v in kernel.consts.items()) + " };")
    lines.append(f"typedef {CTYPES[kernel.dtype]} T;")
    for param, arg in zip(kernel.params, args):
        if isinstance(arg, np.ndarray):
            const = "" if param in kernel.outputs else "const "
            restrict = "" if id(arg) in aliased else "restrict "
            params.append(f"{const}{CTYPES[arg.dtype]} *{restrict}{param}")
        else:
            lines.append(f"const double {param} = {_literal(arg)};")
    lines += kernel.body.splitlines()
    return "\n".join(
        [
            f"/* {kernel.name} */",
            f"static void {name}({', '.join(params) or 'void'})",
            "{",
            *("    " + line if line else "" for line in lines),
            "}",
            "",
        ]
    )


def render_invocation(name, args, name_of):
    """The call of a function from :func:`render_function`; ``name_of(array)`` is its C name."""
    return f"{name}({', '.join(name_of(a) for a in args if isinstance(a, np.ndarray))});"


HEADER = (
    """\
#include <stdbool.h>
#include <stdint.h>
"""
    + MATH
)


#: Denormals are kept (IEEE 754 default) on the C device: flushing them is an x86 mode that ARM,
#: RISC-V and WebAssembly runs could not reproduce, and a C step must give the same bits on every
#: target (the exported trainer runs it there). Kept as empty hooks for the step's shape.
FLUSH_DENORMALS = """\
#define DISPATCHRL_FLUSH_ENTER
#define DISPATCHRL_FLUSH_EXIT
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

    def call(kernel, args):
        helpers.update(dict.fromkeys(kernel.helpers))
        for a in args:
            if isinstance(a, np.ndarray):
                name_of(a)
        text = render_function(kernel, args, "@NAME")
        name = functions.setdefault(text, f"k{len(functions)}")
        return render_invocation(name, args, lambda a: names[id(a)])

    body = render_statements(calls, "        ", name_of, call)
    pointers = [f"    {CTYPES[a.dtype]} *const a{i} = ({CTYPES[a.dtype]} *)arrays[{i}];" for i, a in enumerate(arrays)]
    source = "\n".join(
        [
            "/* generated by dispatchrl.backends.c: one fused step, do not edit */",
            HEADER,
            *helpers,
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
        ]
    )
    return source, arrays


def render_statements(nodes, indent, counter_name, render_call):
    """C statements for recorded ``nodes`` at ``indent``: a staged branch becomes an ``if`` (and
    ``else``) on its counter array, named by ``counter_name(array)``; a call (kernel, args) the line
    ``render_call(kernel, args)`` returns, given the raw arrays of ``args``. Names are asked for in
    the order the statements are written (render_step and the exported trainer number by it)."""
    lines = []
    for node in nodes:
        if isinstance(node, Branch):
            counter = counter_name(raw(node.condition.counter))
            lines.append(f"{indent}if ({condition_expression(node.condition, counter)}) {{")
            lines += render_statements(node.then, indent + "    ", counter_name, render_call)
            if node.otherwise:
                lines.append(f"{indent}}} else {{")
                lines += render_statements(node.otherwise, indent + "    ", counter_name, render_call)
            lines.append(f"{indent}}}")
            continue
        kernel, args = node
        lines.append(indent + render_call(kernel, [raw(a) for a in args]))
    return lines


def condition_expression(condition, counter):
    """A staged condition as a C expression over the int64 counter array ``counter`` (Python's
    floored ``%``, so a negative counter tests as on the other devices)."""
    if type(condition) is Every:
        p = condition.period  # at most 2**62 (renders_in_c): c % p + p cannot overflow
        return f"(({counter}[0] % INT64_C({p})) + INT64_C({p})) % INT64_C({p}) == {condition.offset}"
    if type(condition) is Below:
        limit = condition.limit
        if not -(2**63) < limit < 2**63:  # beyond int64: always or never
            return "1" if limit > 0 else "0"
        return f"{counter}[0] < INT64_C({limit})"
    raise ConfigError(f"C device: cannot render a {type(condition).__name__} condition in C")


def renders_in_c(nodes):
    """Whether ``nodes`` (recorded calls and branches) can become one C function: every kernel a
    CKernel, every condition an Every or Below on an int64 counter."""
    for node in nodes:
        if isinstance(node, Branch):
            if (
                type(node.condition) not in (Every, Below)
                or raw(node.condition.counter).dtype != np.int64
                or getattr(node.condition, "period", 1) > 2**62
            ):
                return False
            if not (renders_in_c(node.then) and renders_in_c(node.otherwise)):
                return False
        elif not isinstance(node[0], CKernel):
            return False
    return True
