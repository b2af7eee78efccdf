"""Deploy a trained :class:`dispatchrl.nn.Policy` as C: sources, host and cross builds.

header, source = dispatchrl.export.c_source(policy)
paths = dispatchrl.export.write_policy(policy, "out", target="cortex-m4")
"""

import ctypes
from pathlib import Path

from ..backends.c.compiler import host_compiler, load_library, run_compiler
from .elf import code_size, undefined_symbols
from .source import SELFTEST_TOLERANCE, c_source, check_policy, main_source, selftest_observations
from .targets import LIBM_SYMBOLS, TARGETS, build, get_target, run_executable, target_compiler

__all__ = [
    "LIBM_SYMBOLS",
    "SELFTEST_TOLERANCE",
    "TARGETS",
    "build",
    "c_source",
    "check_policy",
    "code_size",
    "host_library",
    "run_executable",
    "selftest_observations",
    "target_compiler",
    "undefined_symbols",
    "write_policy",
]


def write_policy(policy, out_dir, target=None, name="policy", env=None):
    """Write ``<name>.h`` and ``<name>.c`` for ``policy`` into ``out_dir`` and, if ``target`` is
    given (see :data:`TARGETS`), build them: Linux targets get ``<name>_main.c`` and an executable
    (``<name>`` on the host, ``<name>-<target>`` otherwise) that runs the self-test and prints
    actions; ``cortex-m4`` gets the object ``<name>-cortex-m4.o``.

    ``env``: the native env the policy was trained on (a checkpoint's), which may add C of its
    own (:meth:`~dispatchrl.envs.NativeEnv.exported_policy_c`: the multirotor's ``controller``).

    Returns ``{"header", "source"[, "main"], ["binary"]}`` → Path. Bad policies raise
    ShapeError/ConfigError, unknown targets ConfigError, a missing compiler DeviceError naming
    what to install, all before anything is written."""
    spec = get_target(target) if target is not None else None
    extra = ("", "")
    if env is not None and hasattr(env, "exported_policy_c"):
        extra = env.exported_policy_c(name)
    header, source = c_source(policy, name, extra)
    if spec is not None:
        target_compiler(spec)  # fail before writing when the toolchain is missing
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"header": out / f"{name}.h", "source": out / f"{name}.c"}
    paths["header"].write_text(header)
    paths["source"].write_text(source)
    if spec is None:
        return paths
    if spec.output == "executable":
        paths["main"] = out / f"{name}_main.c"
        paths["main"].write_text(main_source(name))
    paths["binary"] = build(spec, paths["source"], paths.get("main"))
    return paths


def host_library(source, extra_sources=(), name=None, flags=("-O2",)):
    """Compile an exported ``<name>.c`` (plus ``extra_sources``, e.g. a benchmark loop) into a
    shared library ``lib<name>.so`` next to it with the host compiler, and load it with ctypes."""
    source = Path(source)
    library = source.with_name(f"lib{name or source.stem}.so")
    run_compiler(
        host_compiler(),
        [
            *flags,
            "-std=c99",
            "-ffp-contract=off",
            "-fPIC",
            "-shared",
            "-I",
            str(source.parent),
            str(source),
            *map(str, extra_sources),
            "-o",
            str(library),
            "-lm",
        ],
        f"{source.name} for the host",
    )
    lib = load_library(library)
    forward = getattr(lib, f"{source.stem}_forward")
    forward.argtypes, forward.restype = (ctypes.POINTER(ctypes.c_float),) * 2, None
    getattr(lib, f"{source.stem}_selftest").restype = ctypes.c_int
    return lib
