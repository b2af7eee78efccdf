"""Build and run an exported trainer: the host (system compiler), Linux on aarch64, armhf and
riscv64 (static zig-built executables run under qemu-user), a bare-metal Cortex-M7 ELF (own startup
code, linker script and semihosting output, run under ``qemu-system-arm -M mps2-an500``) and
wasm32-wasi (run under Node's ``wasi`` module). Every build uses the same float flags, so every
target prints the host's checksum."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..backends.c.compiler import host_compiler, run_compiler, zig_command
from ..errors import ConfigError, DeviceError

__all__ = [
    "HOST_FLAGS",
    "LINKER_SCRIPT",
    "MAKEFILE",
    "STARTUP_C",
    "TRAINER_TARGETS",
    "RunPlan",
    "TrainerTarget",
    "build_trainer",
    "elf_size",
    "run_plan",
    "run_trainer",
]

#: the same rounding on every target: C99, no FMA contraction, no reassociation
FLAGS = ("-O3", "-std=c99", "-ffp-contract=off", "-fno-math-errno", "-fno-trapping-math")
#: the host build's: the machine's own vector width (about 10x faster than without; the same bits,
#: every product's sums stay in order)
HOST_FLAGS = (*FLAGS, "-march=native")

#: written beside every exported trainer's sources: the host build with the flags --target host uses
MAKEFILE = f"""\
# Makefile of an exported trainer: `make`, then ./trainer [steps] [seed] [episodes].
# FLOAT_FLAGS give every target the same rounding, so the same checksum; -march=native lets the
# compiler use this CPU's vectors: about 10x faster than without, with the same bits. (A compiler
# without -march: make CFLAGS='$(FLOAT_FLAGS)'.)
FLOAT_FLAGS = {" ".join(FLAGS)}
CFLAGS = $(FLOAT_FLAGS) {" ".join(HOST_FLAGS[len(FLAGS) :])}

trainer: main.c trainer.c trainer.h
\t$(CC) $(CFLAGS) -I. main.c trainer.c -o $@

clean:
\trm -f trainer

.PHONY: clean
"""


@dataclass(frozen=True)
class TrainerTarget:
    name: str
    zig_flags: tuple = ()
    runner: str = ""  # qemu binary (or "node") that runs the build here
    suffix: str = ""


TRAINER_TARGETS = {
    t.name: t
    for t in [
        TrainerTarget("host"),
        TrainerTarget("aarch64-linux", ("-target", "aarch64-linux-musl", "-static"), "qemu-aarch64", "-aarch64"),
        TrainerTarget(
            "armhf-linux",
            ("-target", "arm-linux-musleabihf", "-mcpu=generic+v7a+vfp3d16", "-static"),
            "qemu-arm",
            "-armhf",
        ),
        TrainerTarget("riscv64-linux", ("-target", "riscv64-linux-musl", "-static"), "qemu-riscv64", "-riscv64"),
        # Cortex-M7 with the double-precision FPv5 (the Teensy 4.1's i.MX RT1062 has it): the C
        # device's env physics and RNG run in double; no soft-float calls
        TrainerTarget(
            "cortex-m7",
            (
                "-target",
                "thumb-freestanding-eabihf",
                "-mcpu=cortex_m7+fp_armv8d16",
                "-ffreestanding",
                "-fno-unwind-tables",
                "-fno-asynchronous-unwind-tables",
            ),
            "qemu-system-arm",
            ".elf",
        ),
        # SIMD128 (Node >= 16), vectorised loops interleaved 4x (as the web build, export/web.py):
        # each lane keeps its operation order, so the same bits
        TrainerTarget(
            "wasm32-wasi",
            ("-target", "wasm32-wasi", "-msimd128", "-mllvm", "-force-vector-interleave=4"),
            "node",
            ".wasm",
        ),
    ]
}


#: seconds per TD3 Pendulum step under qemu (the table in docs/guides/microcontrollers-wasm.md: 300 steps each on AMD EPYC, quiet;
#: a loaded machine takes up to 1.5x as long)
EMULATED_SECONDS_PER_STEP = {
    "aarch64-linux": 16.0 / 300,
    "armhf-linux": 19.5 / 300,
    "riscv64-linux": 48.6 / 300,
    "cortex-m7": 12.8 / 300,
}
#: what ``--run`` trains under emulation unless ``--steps`` is given: enough for a checksum
EMULATED_CHECK_STEPS = 300


@dataclass(frozen=True)
class RunPlan:
    steps: int  # what the run trains
    timeout: float  # seconds before the runner gives up
    note: str  # what to tell the user before it starts ("" on the host)


def run_plan(target: str, steps: int, steps_given: bool, timeout: float = 600) -> RunPlan:
    """How ``export-trainer --run`` runs ``steps`` on ``target``: natively in full; under emulation
    (qemu: 10-50 ms a step) a short check of EMULATED_CHECK_STEPS unless ``steps_given``, and then
    with the timeout scaled to the estimated time; ``note`` says which and how long."""
    rate = EMULATED_SECONDS_PER_STEP.get(get_trainer_target(target).name)
    if rate is None:
        return RunPlan(steps, timeout, "")
    if not steps_given and steps > EMULATED_CHECK_STEPS:
        note = (
            f"{target} runs under emulation (about {rate * 1000:.0f} s per 1000 steps): --run trains "
            f"{EMULATED_CHECK_STEPS} steps as a check instead of the config's {steps} (about {rate * steps:.0f} s); "
            "pass --steps to train more"
        )
        return RunPlan(EMULATED_CHECK_STEPS, timeout, note)
    estimate = rate * steps
    return RunPlan(
        steps,
        max(timeout, 3 * estimate),
        f"{target} runs under emulation: {steps} steps take about {estimate:.0f} s (more on a loaded machine)",
    )


def get_trainer_target(name: str) -> TrainerTarget:
    if name not in TRAINER_TARGETS:
        raise ConfigError(f"export-trainer: unknown target {name!r}; expected one of {', '.join(TRAINER_TARGETS)}")
    return TRAINER_TARGETS[name]


STARTUP_C = r"""/* startup.c: bare-metal Cortex-M7 (mps2-an500 / any ARMv7E-M with FPv5) runtime for the trainer:
   vector table, reset handler enabling the FPU before any C runs, .data/.bss setup, semihosting
   output and clock, and a main printing the same JSON line as main.c. */
#include <stdint.h>
#include "trainer.h"

extern uint32_t _sidata, _sdata, _edata, _sbss, _ebss, _estack;
int main(void);

static int semihost(int op, const void *arg)
{
    register int r0 __asm__("r0") = op;
    register const void *r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}

static void write0(const char *s) { semihost(0x04, s); }

__attribute__((used)) void reset_c(void)
{
    uint32_t *src = &_sidata, *dst = &_sdata;
    while (dst < &_edata) *dst++ = *src++;
    for (dst = &_sbss; dst < &_ebss;) *dst++ = 0;
    main();
    semihost(0x18, (const void *)0x20026u); /* SYS_EXIT, ADP_Stopped_ApplicationExit (AArch32: the reason itself) */
    for (;;) {}
}

__attribute__((naked, noreturn)) void reset_handler(void)
{
    /* CPACR |= full access to CP10/CP11, then dsb/isb: the first FP instruction would fault otherwise */
    __asm__ volatile(
        "ldr r0, =0xE000ED88\n"
        "ldr r1, [r0]\n"
        "orr r1, r1, #(0xF << 20)\n"
        "str r1, [r0]\n"
        "dsb\n"
        "isb\n"
        "b reset_c\n");
}

static void fault_handler(void) { write0("fault\n"); for (;;) {} }

__attribute__((section(".vectors"), used)) static void (*const vectors[16])(void) = {
    (void (*)(void))(&_estack), reset_handler, fault_handler, fault_handler, fault_handler, fault_handler,
    fault_handler, 0, 0, 0, 0, fault_handler, fault_handler, 0, fault_handler, fault_handler};

/* the compiler may turn loops into these calls */
__attribute__((weak)) void *memset(void *d, int c, unsigned int n)
{ unsigned char *p = d; while (n--) *p++ = (unsigned char)c; return d; }
__attribute__((weak)) void *memcpy(void *d, const void *s, unsigned int n)
{ unsigned char *p = d; const unsigned char *q = s; while (n--) *p++ = *q++; return d; }
__attribute__((weak)) void *memmove(void *d, const void *s, unsigned int n)
{ unsigned char *p = d; const unsigned char *q = s;
  if (p < q) { while (n--) *p++ = *q++; } else { p += n; q += n; while (n--) *--p = *--q; } return d; }

static char *put_str(char *p, const char *s) { while (*s) *p++ = *s++; return p; }
static char *put_uint(char *p, uint64_t v)
{
    char tmp[24]; int n = 0;
    do { tmp[n++] = (char)('0' + v % 10); v /= 10; } while (v);
    while (n) *p++ = tmp[--n];
    return p;
}
static char *put_fixed(char *p, double v, int decimals)  /* like printf("%.*f") for |v| < 1e15 */
{
    if (v < 0) { *p++ = '-'; v = -v; }
    uint64_t scale = 1;
    for (int i = 0; i < decimals; i++) scale *= 10;
    const uint64_t scaled = (uint64_t)(v * (double)scale + 0.5);
    p = put_uint(p, scaled / scale);
    *p++ = '.';
    uint64_t frac = scaled % scale;
    for (uint64_t d = scale / 10; d; d /= 10) { *p++ = (char)('0' + frac / d); frac %= d; }
    return p;
}
static char *put_hex(char *p, uint64_t v)
{
    for (int i = 15; i >= 0; i--) *p++ = "0123456789abcdef"[(v >> (4 * i)) & 15];
    return p;
}

#ifdef TRAINER_SEED_OVERRIDE
#define RUN_SEED UINT64_C(TRAINER_SEED_OVERRIDE)
#else
#define RUN_SEED TRAINER_SEED
#endif

int main(void)
{
    const int64_t steps = TRAINER_RUN_STEPS;
    trainer_init(RUN_SEED);
    const int start = semihost(0x10, 0);   /* SYS_CLOCK: centiseconds */
    trainer_run(steps);
    const int stop = semihost(0x10, 0);
    const double eval_return = trainer_evaluate(TRAINER_EVAL_EPISODES);
    static char line[256];
    char *p = line;
    p = put_str(p, "{\"algo\": \"" TRAINER_ALGO "\", \"env\": \"" TRAINER_ENV "\", \"seed\": ");
    p = put_uint(p, RUN_SEED);
    p = put_str(p, ", \"steps\": ");
    p = put_uint(p, (uint64_t)steps);
    p = put_str(p, ", \"train_seconds\": ");
    p = put_fixed(p, (double)(stop - start) / 100.0, 4);
    p = put_str(p, ", \"eval_return\": ");
    p = put_fixed(p, eval_return, 3);
    p = put_str(p, ", \"checksum\": \"");
    p = put_hex(p, trainer_checksum());
    p = put_str(p, "\"}\n");
    *p = 0;
    write0(line);
    return 0;
}
"""

#: mps2-an500: code at 0x0, RAM at 0x20000000 (4 MiB each in qemu; the Teensy 4.1 has 1 MiB RAM)
LINKER_SCRIPT = """\
ENTRY(reset_handler)
MEMORY
{
  FLASH (rx) : ORIGIN = 0x00000000, LENGTH = 4M
  RAM (rwx)  : ORIGIN = 0x20000000, LENGTH = 4M
}
_estack = ORIGIN(RAM) + LENGTH(RAM);
SECTIONS
{
  .text : { KEEP(*(.vectors)) *(.text*) *(.rodata*) . = ALIGN(4); } > FLASH
  .ARM.exidx : { *(.ARM.exidx*) } > FLASH
  _sidata = LOADADDR(.data);
  .data : { . = ALIGN(4); _sdata = .; *(.data*) . = ALIGN(4); _edata = .; } > RAM AT > FLASH
  .bss (NOLOAD) : { . = ALIGN(4); _sbss = .; *(.bss*) *(COMMON) . = ALIGN(4); _ebss = .; } > RAM
}
"""

NODE_WASI = """\
// run_wasi.mjs: run a wasm32-wasi trainer under Node's WASI (node run_wasi.mjs trainer.wasm [args...])
import { readFile } from 'node:fs/promises';
import { WASI } from 'node:wasi';
import process from 'node:process';
const [path, ...args] = process.argv.slice(2);
const wasi = new WASI({ version: 'preview1', args: [path, ...args], env: {} });
const module = await WebAssembly.compile(await readFile(path));
const instance = await WebAssembly.instantiate(module, wasi.getImportObject());
wasi.start(instance);
"""


def _compiler(target: TrainerTarget) -> tuple:
    if target.name == "host":
        return host_compiler()
    if zig_command() is None:
        raise DeviceError(
            f"export-trainer: target {target.name} needs zig cc: pip install 'dispatchrl[cross]' (ziglang)"
        )
    return zig_command()


def build_trainer(
    directory: str | Path,
    target: str = "host",
    steps: int | None = None,
    seed: int | None = None,
    eval_episodes: int = 10,
) -> Path:
    """Build the trainer in ``directory`` (trainer.h, trainer.c, main.c) for ``target``; returns the
    executable, ELF or .wasm. ``steps``/``seed`` are the Cortex-M7 run's (its main takes no arguments)."""
    spec = get_trainer_target(target)
    directory = Path(directory)
    command = _compiler(spec)
    include = ("-I", str(directory))
    out = directory / f"trainer{spec.suffix}"
    if spec.name == "cortex-m7":
        (directory / "startup.c").write_text(STARTUP_C)
        (directory / "cortex-m7.ld").write_text(LINKER_SCRIPT)
        defines = [
            f"-DTRAINER_RUN_STEPS={int(steps) if steps is not None else 'TRAINER_STEPS'}",
            f"-DTRAINER_EVAL_EPISODES={int(eval_episodes)}",
        ]
        if seed is not None:
            defines.append(f"-DTRAINER_SEED_OVERRIDE={int(seed)}")
        run_compiler(
            command,
            [
                *FLAGS,
                *spec.zig_flags,
                *include,
                *defines,
                "-T",
                str(directory / "cortex-m7.ld"),
                str(directory / "startup.c"),
                str(directory / "trainer.c"),
                "-o",
                str(out),
            ],
            f"the trainer for {spec.name}",
        )
        return out
    if spec.name == "wasm32-wasi":
        (directory / "run_wasi.mjs").write_text(NODE_WASI)
    flags = (
        HOST_FLAGS if spec.name == "host" and command == host_compiler() and "zig" not in " ".join(command) else FLAGS
    )
    run_compiler(
        command,
        [*flags, *spec.zig_flags, *include, str(directory / "main.c"), str(directory / "trainer.c"), "-o", str(out)],
        f"the trainer for {spec.name}",
    )
    return out


def run_trainer(
    path: str | Path, target: str = "host", steps: int | None = None, seed: int | None = None, timeout: float = 600
) -> dict:
    """Run a built trainer (under its emulator or runtime) and return its JSON line as a dict."""
    spec = get_trainer_target(target)
    path = Path(path).resolve()
    args = [] if steps is None else [str(int(steps))] + ([] if seed is None else [str(int(seed))])
    if spec.name == "host":
        command = [str(path), *args]
    elif spec.name == "cortex-m7":
        command = [spec.runner, "-M", "mps2-an500", "-nographic", "-semihosting", "-kernel", str(path)]
    elif spec.name == "wasm32-wasi":
        # --no-liftoff: main calls trainer_run once, and V8 tiers a wasm function up only between
        # calls (no on-stack replacement), so the whole run would stay in the baseline compiler
        command = ["node", "--no-liftoff", str(path.parent / "run_wasi.mjs"), str(path), *args]
    else:
        command = [spec.runner, str(path), *args]
    if not shutil.which(command[0]):
        raise DeviceError(
            f"export-trainer: running {spec.name} needs {command[0]} (apt-get install "
            f"{'nodejs' if command[0] == 'node' else 'qemu-user qemu-system-arm'})"
        )
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise DeviceError(f"export-trainer: {path.name} on {spec.name} ran past {timeout} s") from None
    lines = [
        line for line in (done.stdout + "\n" + done.stderr).splitlines() if line.startswith("{")
    ]  # semihosting: stderr
    if done.returncode != 0 or not lines:
        raise DeviceError(
            f"export-trainer: {path.name} on {spec.name} failed (exit {done.returncode}): "
            f"{(done.stderr or done.stdout).strip()[-2000:]}"
        )
    return json.loads(lines[-1])


def elf_size(path: str | Path) -> dict:
    """text, data, bss of an ELF (Berkeley ``size`` semantics), read with the ELF section headers."""
    from .elf import sections

    sizes = {"text": 0, "data": 0, "bss": 0}
    for sec in sections(path):
        if not sec["flags"] & 0x2:  # SHF_ALLOC
            continue
        kind = "bss" if sec["type"] == 8 else "data" if sec["flags"] & 0x1 else "text"  # SHT_NOBITS, SHF_WRITE
        sizes[kind] += sec["size"]
    sizes["total"] = sizes["text"] + sizes["data"] + sizes["bss"]
    return sizes
