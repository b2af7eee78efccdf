"""Build targets for exported policies: the host, Linux on three other ISAs (static executables
run under qemu-user), and a Cortex-M4 object file. A system cross compiler is used when present,
else ``zig cc`` (``pip install 'dispatchrl[cross]'``)."""

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..backends.c.compiler import host_compiler, run_compiler, zig_command
from ..errors import ConfigError, DeviceError

__all__ = [
    "LIBM_SYMBOLS",
    "TARGETS",
    "Target",
    "build",
    "get_target",
    "run_executable",
    "target_compiler",
]

#: every build: C99, no contraction into FMAs so results round like the Python policy's
COMMON_FLAGS = ("-O2", "-std=c99", "-ffp-contract=off")


@dataclass(frozen=True)
class Target:
    name: str
    output: str  # "executable" (runs the self-test, prints actions) or "object"
    zig_flags: tuple  # for zig cc
    cross: str = ""  # system cross compiler looked for on PATH
    cross_flags: tuple = ()
    apt: str = ""  # Debian package of that cross compiler
    qemu: str = ""  # qemu-user binary that runs the executable on this machine


TARGETS = {
    t.name: t
    for t in [
        Target("host", "executable", ()),
        Target(
            "aarch64-linux",
            "executable",
            ("-target", "aarch64-linux-musl"),
            "aarch64-linux-gnu-gcc",
            ("-static",),
            "gcc-aarch64-linux-gnu",
            "qemu-aarch64",
        ),
        Target(
            "armhf-linux",
            "executable",
            ("-target", "arm-linux-musleabihf", "-mcpu=generic+v7a+vfp3d16"),
            "arm-linux-gnueabihf-gcc",
            ("-static",),
            "gcc-arm-linux-gnueabihf",
            "qemu-arm",
        ),
        Target(
            "riscv64-linux",
            "executable",
            ("-target", "riscv64-linux-musl"),
            "riscv64-linux-gnu-gcc",
            ("-static",),
            "gcc-riscv64-linux-gnu",
            "qemu-riscv64",
        ),
        # thumbv7em with the single-precision FPU, hard-float ABI; the compilers must not turn
        # loops into memcpy/memset calls, which a bare-metal object could not resolve
        Target(
            "cortex-m4",
            "object",
            (
                "-target",
                "thumb-freestanding-eabihf",
                "-mcpu=cortex_m4+vfp4d16sp",
                "-fno-builtin",
                "-ffreestanding",
                "-fno-unwind-tables",
                "-fno-asynchronous-unwind-tables",
            ),
            "arm-none-eabi-gcc",
            (
                "-mcpu=cortex-m4",
                "-mthumb",
                "-mfloat-abi=hard",
                "-mfpu=fpv4-sp-d16",
                "-ffreestanding",
                "-fno-tree-loop-distribute-patterns",
            ),
            "gcc-arm-none-eabi",
        ),
    ]
}

#: what a cortex-m4 object may leave undefined: libm, nothing else
LIBM_SYMBOLS = frozenset(
    f + s for f in ("tanh", "erf", "exp", "sqrt", "log", "cos", "sin", "pow", "fabs") for s in ("", "f")
)


def get_target(name):
    if name not in TARGETS:
        raise ConfigError(f"export: unknown target {name!r}; expected one of {', '.join(TARGETS)}")
    return TARGETS[name]


def target_compiler(target):
    """``(command prefix, flags)`` that build for ``target``; DeviceError naming what to install."""
    target = get_target(target) if isinstance(target, str) else target
    if target.name == "host":
        return host_compiler(), ()
    if shutil.which(target.cross):
        return (shutil.which(target.cross),), target.cross_flags
    if zig_command():
        return zig_command(), target.zig_flags
    raise DeviceError(
        f"export: target {target.name} needs a cross compiler and none was found: "
        f"pip install 'dispatchrl[cross]' (zig cc, every target) or "
        f"apt-get install {target.apt}"
    )


def build(target, source, main=None, out=None):
    """Compile ``source`` (and ``main``) for ``target`` into ``out``; returns its path."""
    target = get_target(target) if isinstance(target, str) else target
    command, flags = target_compiler(target)
    source = Path(source)
    include = ("-I", str(source.parent))
    if target.output == "object":
        out = Path(out or source.with_name(f"{source.stem}-{target.name}.o"))
        run_compiler(
            command,
            [*COMMON_FLAGS, *flags, *include, "-c", str(source), "-o", str(out)],
            f"{source.name} for {target.name}",
        )
    else:
        if main is None:
            raise ConfigError(f"export: target {target.name} builds an executable and needs a main source")
        suffix = "" if target.name == "host" else f"-{target.name}"
        out = Path(out or source.with_name(source.stem + suffix))
        run_compiler(
            command,
            [*COMMON_FLAGS, *flags, *include, str(source), str(main), "-o", str(out), "-lm"],
            f"{source.name} for {target.name}",
        )
    return out


def run_executable(path, target="host", observations=None, timeout=120):
    """Run an exported executable (under qemu-user for foreign targets): its self-test, then the
    actions for ``observations`` (rows), returned as a float64 array (one row per observation;
    the embedded test observations' actions if none are given)."""
    target = get_target(target) if isinstance(target, str) else target
    if target.output != "executable":
        raise ConfigError(f"export: target {target.name} builds an object file, which cannot be run here")
    command = [str(Path(path).resolve())]
    if target.qemu:
        if not shutil.which(target.qemu):
            raise DeviceError(
                f"export: running {target.name} executables needs {target.qemu}: apt-get install qemu-user"
            )
        command = [shutil.which(target.qemu), *command]
    if observations is not None:
        command += [f"{v:.9g}" for v in np.asarray(observations, np.float32).reshape(-1)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise DeviceError(f"export: {Path(path).name} failed (exit {done.returncode}): {done.stderr.strip()}")
    return np.array([[float(v) for v in line.split()] for line in done.stdout.strip().splitlines()])
