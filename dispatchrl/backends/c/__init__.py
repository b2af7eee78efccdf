"""The C runtime: C kernel blocks and their rendering (:mod:`.render`), the host C compiler and
its on-disk library cache (:mod:`.compiler`), and ``compile_step(C)`` (:mod:`.program`)."""

from .compiler import compile_shared, host_compiler, load_library, run_compiler, zig_command
from .program import borrow_methods, c_program
from .render import CTYPES, CKernel, axes, c_method, render_function, render_invocation, render_step, renders_in_c

__all__ = [
    "CTYPES",
    "CKernel",
    "axes",
    "borrow_methods",
    "c_method",
    "c_program",
    "compile_shared",
    "host_compiler",
    "load_library",
    "render_function",
    "render_invocation",
    "render_step",
    "renders_in_c",
    "run_compiler",
    "zig_command",
]
