"""The host C compiler behind the C device: find it, turn generated C into shared libraries cached
on disk by a hash of (source, compiler, flags), and load them with ctypes.

Compiler choice: ``$CC`` if set, else ``cc``/``gcc``/``clang`` on PATH, else ``zig cc`` (from the
``ziglang`` package, ``pip install 'dispatchrl[cross]'``).
"""

import ctypes
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path
from typing import Literal

from ...cache import cache_dir, overflow_dir, warn_once
from ...errors import DeviceError

__all__ = [
    "array_pointers",
    "compile_shared",
    "host_compiler",
    "load_library",
    "run_compiler",
    "step_function",
    "zig_command",
]

#: -ffp-contract=off: no fused multiply-adds, so results (and the RNG stream) round like numpy's;
#: no -fopenmp-simd or -ffast-math: a reduction sums in source order, as on every other target
#: (the exported trainer must give the host's bits on ARM, RISC-V, Cortex-M and WebAssembly)
HOST_FLAGS = ("-O3", "-std=c99", "-fPIC", "-shared", "-ffp-contract=off", "-fno-math-errno", "-fno-trapping-math")

INSTALL_HINT = (
    "install a C compiler (Debian/Ubuntu: apt-get install gcc), point $CC at one, "
    "or pip install 'dispatchrl[cross]' for zig cc"
)


@cache
def zig_command():
    """``zig cc`` as a command prefix: a ``zig`` on PATH or the ``ziglang`` package; None if neither."""
    if shutil.which("zig"):
        return (shutil.which("zig"), "cc")
    try:
        import ziglang  # noqa: F401
    except ImportError:
        return None
    return (sys.executable, "-m", "ziglang", "cc")


@cache
def host_compiler():
    """Command prefix of the host C compiler; DeviceError naming what to install if there is none."""
    if os.environ.get("CC"):
        command = tuple(shlex.split(os.environ["CC"]))
        if not shutil.which(command[0]):
            raise DeviceError(f"$CC is {os.environ['CC']!r} but {command[0]!r} is not on PATH; " + INSTALL_HINT)
        return command
    for name in ("cc", "gcc", "clang"):
        if shutil.which(name):
            return (shutil.which(name),)
    if zig_command():
        return zig_command()
    raise DeviceError("the C device needs a C compiler and none was found: " + INSTALL_HINT)


@cache
def _identity(command):
    """The compiler's version banner: part of every cache key, so an upgrade recompiles."""
    try:
        done = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=120, check=False)
    except OSError as e:
        raise DeviceError(f"cannot run the C compiler {' '.join(command)}: {e}; " + INSTALL_HINT) from None
    return done.stdout.strip().splitlines()[0] if done.stdout.strip() else " ".join(command)


def _native_flags(command):
    # Host libraries never leave this machine: let the compiler use every instruction it has
    # (zig cc targets the native CPU by default and spells the flag differently).
    is_zig = any(Path(part).name == "zig" or part == "ziglang" for part in command)
    return () if is_zig else ("-march=native",)


def run_compiler(command, args, what):
    """Run ``command + args``; DeviceError with the compiler's message if it fails."""
    try:
        done = subprocess.run([*command, *args], capture_output=True, text=True, timeout=600, check=False)
    except OSError as e:
        raise DeviceError(f"cannot run the C compiler {' '.join(command)}: {e}; " + INSTALL_HINT) from None
    if done.returncode != 0:
        raise DeviceError(f"C compiler failed on {what}:\n{' '.join([*command, *args])}\n{done.stderr.strip()[-4000:]}")
    return done


def compile_shared(source, prefix="step"):
    """Path of the shared library built from C ``source`` by the host compiler, compiling it only
    when no library for the same (source, compiler, flags) is cached yet."""
    command = host_compiler()
    flags = HOST_FLAGS + _native_flags(command)
    digest = hashlib.sha256("\0".join([source, _identity(command), *flags]).encode()).hexdigest()[:24]
    try:
        return _compiled(cache_dir() / "c", f"{prefix}_{digest}", source, command, flags)
    except (OSError, DeviceError) as error:
        # a full disk under the cache: build into this process's temporary folder instead (a
        # real compiler error fails there too, and is raised from there)
        library = _compiled(overflow_dir() / "c", f"{prefix}_{digest}", source, command, flags)
        warn_once(
            "c-write",
            f"dispatchrl could not build {library.name} in its cache {cache_dir() / 'c'} "
            f"({getattr(error, 'strerror', None) or str(error)[-300:]}); built in {library.parent} for this process only",
        )
        return library


def _compiled(directory: Path, name: str, source: str, command: list, flags: list) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    library = directory / f"{name}.so"
    if library.exists():
        return library
    src = directory / f"{name}.c"  # kept beside the library for reading
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        tmp_src, tmp_lib = Path(tmp) / src.name, Path(tmp) / library.name
        tmp_src.write_text(source)
        run_compiler(command, [*flags, str(tmp_src), "-o", str(tmp_lib)], f"generated {src.name}")
        os.replace(tmp_src, src)
        os.replace(tmp_lib, library)  # atomic: concurrent processes never load half a library
    return library


def _truncated(library: Path) -> str | None:
    """Why an ELF shared library is cut short (its section headers, at the end of the file, reach
    past it), or None. Loading a truncated library does not fail: its code faults (SIGBUS) when run."""
    try:
        with open(library, "rb") as f:
            header = f.read(64)
        size = library.stat().st_size
    except OSError as error:
        return str(error)
    if len(header) >= 4 and header[:4] != b"\x7fELF":
        return None  # not ELF (macOS): loading checks what it can
    if len(header) < 64:
        return f"{size} bytes, less than an ELF header"
    order: Literal["little", "big"] = "little" if header[5] == 1 else "big"
    if header[4] == 2:  # 64-bit
        offset, entry, count = header[0x28:0x30], header[0x3A:0x3C], header[0x3C:0x3E]
    else:
        offset, entry, count = header[0x20:0x24], header[0x2E:0x30], header[0x30:0x32]
    end = int.from_bytes(offset, order) + int.from_bytes(entry, order) * int.from_bytes(count, order)
    return None if end <= size else f"{size} bytes, its section headers end at byte {end}"


_libraries: dict[str, ctypes.CDLL] = {}


def load_library(path):
    """ctypes handle of a shared library, loaded once per process."""
    path = str(path)
    if path not in _libraries:
        _libraries[path] = ctypes.CDLL(path)
    return _libraries[path]


_step_functions: dict = {}


def step_function(source: str):
    """``void dispatchrl_step(int64_t n, void *const *arrays)`` of generated ``source``, compiled
    (or loaded from the disk cache) once per process."""
    if source not in _step_functions:
        library = compile_shared(source)
        problem = _truncated(library)
        if problem is None:
            try:
                handle = load_library(library)
            except OSError as error:
                problem = str(error)
        if problem is not None:  # a damaged cached library: discarded, rebuilt
            warn_once("c-damaged", f"dispatchrl: the cached C library {library} is damaged ({problem}); rebuilt")
            library.unlink(missing_ok=True)
            handle = load_library(compile_shared(source))
        fn = handle.dispatchrl_step
        fn.argtypes, fn.restype = (ctypes.c_int64, ctypes.POINTER(ctypes.c_void_p)), None
        _step_functions[source] = fn
    return _step_functions[source]


def array_pointers(arrays: list):
    """The data pointers of host ``arrays`` as the ``void *const *`` a step function takes."""
    return (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
