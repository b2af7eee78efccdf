"""``compile_step(C)``: a traced step as one generated C function, built by the host compiler
into a shared library cached on disk by source hash and called through ctypes with the arrays'
data pointers prepared once. Kernels the C device borrows from the CPU device (see
:func:`borrow_methods`) split the step into C segments and host segments."""

from typing import cast

from ...devices import CPU, C
from ...staging import Program, compile_step, segmented_program
from .compiler import array_pointers, step_function
from .render import render_step, renders_in_c

__all__ = ["borrow_methods", "c_program"]


def c_program(calls: list) -> Program:
    """One C function over ``calls`` (every node renders in C); ``run.source`` is its C source."""
    source, arrays = render_step(calls)
    fn, pointers = step_function(source), array_pointers(arrays)

    def run(n) -> None:
        fn(n, pointers)  # `pointers` keeps the arrays' addresses; the closure keeps them alive

    run.source, run.arrays = source, arrays  # type: ignore[attr-defined]  # for export and tests
    return run


def _renders(node: object) -> bool:
    return renders_in_c([node])


def _host_program(calls: list) -> Program:
    # borrowed host kernels run as the CPU device runs them
    return cast(Program, compile_step(CPU(), calls))


@compile_step.dispatch
def compile_step(device: C, calls: list) -> Program:
    # One C function when everything renders in C (branches included); otherwise runs of C nodes
    # become C functions, runs of borrowed host kernels run as on CPU, and a branch containing host
    # kernels tests its condition from Python, each time round (staging.segmented_program).
    return segmented_program(calls, _renders, c_program, _host_program)


def borrow_methods(*functions, source=CPU()) -> None:
    """Let the C device run ``functions`` with ``source``'s methods until they get C ones.

    C arrays are host numpy arrays, so host kernels work on them unchanged; a fused step then
    alternates C segments with them. Borrowed methods have lower precedence, so a real C method
    registered later wins."""
    for fn in functions:

        def method(device: C, *args, _fn=fn):
            _fn.function.invoke(type(source), *map(type, args))(device, *args)

        fn.dispatch(method, precedence=-1)
