"""An exported multirotor policy on a Cortex-M4: the object's sizes and the instructions one
``controller()`` call executes.

Exports CHECKPOINT (default: an untrained TD3 multirotor policy of the recipe's 146-64-64-4 tanh
network; tanhf's branches depend on its inputs, so a trained policy's count differs by a few
percent: 96.3k untrained, 98.5k after 300k steps) with ``--target cortex-m4``, then links that very
object into a bare-metal program (the Cortex-M7 trainer's startup code and linker script,
dispatchrl/export/trainer_targets.py) for QEMU's ``mps2-an386`` (Cortex-M4F) that runs ``policy_selftest`` and ``controller`` RUNS times.

How it counts: qemu-system-arm with one guest instruction per translation block (``-singlestep``)
and ``-d exec,nochain`` logs one line per executed instruction; the program is built twice, with
0 and with ``--runs`` calls, and the difference in lines over ``--runs`` is the instructions per
call (the call and loop included; startup and self-test cancel). An exact count of instructions
executed; QEMU is not cycle-accurate, so no cycle figure: a Cortex-M4 takes about 1 cycle per
integer/FPU instruction, more for loads after stores, branches and VDIV (14 cycles), with flash wait
states on top at high clock rates.

tanhf is not in the object (it needs libm); the program links musl's tanhf/expm1f (the fdlibm
algorithm newlib's also uses), included here, compiled with the policy's flags.

Prints one JSON object. Needs zig cc (pip install 'dispatchrl[cross]') or arm-none-eabi-gcc, and
qemu-system-arm. Usage: python benchmarks/cortex_m4_policy.py [--checkpoint A.npz] [--runs 4]
"""

import argparse
import dataclasses
import json
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from dispatchrl import export
from dispatchrl.backends.c.compiler import run_compiler
from dispatchrl.export.elf import sections as elf_sections
from dispatchrl.export.targets import COMMON_FLAGS
from dispatchrl.export.trainer_targets import LINKER_SCRIPT, STARTUP_C

#: musl 1.2 src/math/tanhf.c and expm1f.c (MIT; from FreeBSD's fdlibm), libm.h inlined
TANHF_C = r"""
#include <stdint.h>
#define FORCE_EVAL(x) do { volatile float drl_force = (x); (void)drl_force; } while (0)

static const float
ln2_hi = 6.9313812256e-01f, ln2_lo = 9.0580006145e-06f, invln2 = 1.4426950216e+00f,
Q1 = -3.3333212137e-2f, Q2 = 1.5807170421e-3f;

float expm1f(float x)
{
    float y, hi, lo, c, t, e, hxs, hfx, r1, twopk;
    union {float f; uint32_t i;} u = {x};
    uint32_t hx = u.i & 0x7fffffff;
    int k, sign = u.i >> 31;
    if (hx >= 0x4195b844) {
        if (hx > 0x7f800000) return x;
        if (sign) return -1;
        if (hx > 0x42b17217) { x *= 0x1p127f; return x; }
    }
    if (hx > 0x3eb17218) {
        if (hx < 0x3F851592) {
            if (!sign) { hi = x - ln2_hi; lo = ln2_lo; k = 1; }
            else { hi = x + ln2_hi; lo = -ln2_lo; k = -1; }
        } else {
            k = invln2 * x + (sign ? -0.5f : 0.5f);
            t = k;
            hi = x - t * ln2_hi;
            lo = t * ln2_lo;
        }
        x = hi - lo;
        c = (hi - x) - lo;
    } else if (hx < 0x33000000) {
        if (hx < 0x00800000) FORCE_EVAL(x * x);
        return x;
    } else
        k = 0;
    hfx = 0.5f * x;
    hxs = x * hfx;
    r1 = 1.0f + hxs * (Q1 + hxs * Q2);
    t = 3.0f - r1 * hfx;
    e = hxs * ((r1 - t) / (6.0f - x * t));
    if (k == 0) return x - (x * e - hxs);
    e = x * (e - c) - c;
    e -= hxs;
    if (k == -1) return 0.5f * (x - e) - 0.5f;
    if (k == 1) {
        if (x < -0.25f) return -2.0f * (e - (x + 0.5f));
        return 1.0f + 2.0f * (x - e);
    }
    u.i = (0x7f + k) << 23;
    twopk = u.f;
    if (k < 0 || k > 56) {
        y = x - e + 1.0f;
        if (k == 128) y = y * 2.0f * 0x1p127f;
        else y = y * twopk;
        return y - 1.0f;
    }
    u.i = (0x7f - k) << 23;
    if (k < 23) y = (x - e + (1 - u.f)) * twopk;
    else y = (x - (e + u.f) + 1) * twopk;
    return y;
}

float tanhf(float x)
{
    union {float f; uint32_t i;} u = {.f = x};
    uint32_t w;
    int sign;
    float t;
    sign = u.i >> 31;
    u.i &= 0x7fffffff;
    x = u.f;
    w = u.i;
    if (w > 0x3f0c9f54) {
        if (w > 0x41200000) t = 1 + 0 / x;
        else { t = expm1f(2 * x); t = 1 - 2 / (t + 2); }
    } else if (w > 0x3e82c578) {
        t = expm1f(2 * x); t = t / (t + 2);
    } else if (w >= 0x00800000) {
        t = expm1f(-2 * x); t = -t / (t + 2);
    } else {
        FORCE_EVAL(x * x);
        t = x;
    }
    return sign ? -t : t;
}
"""

MAIN_C = r"""
#include "policy.h"
static void write0(const char *s) { semihost(0x04, s); }
int main(void)
{
    const int failures = policy_selftest();
    volatile float sink = 0.0f;
    for (int k = 0; k < RUNS; k++) {
        float rpm[4];
        controller(policy_test_observations[k % POLICY_TEST_COUNT], rpm);
        sink += rpm[0];
    }
    write0(failures ? "selftest FAILED\n" : "selftest passed\n");
    return 0;
}
"""


def startup_runtime() -> str:
    """trainer_targets.STARTUP_C's runtime (vectors, FPU enable, .data/.bss, semihosting, mem*)
    without its trainer main; the mps2-an386's Cortex-M4F needs the same CPACR write."""
    runtime, marker, _ = STARTUP_C.partition("static char *put_str")
    assert marker and '#include "trainer.h"\n' in runtime, "trainer_targets.STARTUP_C changed shape"
    return runtime.replace('#include "trainer.h"\n', "").replace("static int semihost", "int semihost")


def symbol_sizes(path: Path) -> dict:
    nm = shutil.which("llvm-nm") or shutil.which("arm-none-eabi-nm")
    if nm is None:
        return {}
    done = subprocess.run([nm, "-S", str(path)], capture_output=True, text=True, check=True)
    sizes = {}
    for line in done.stdout.splitlines():
        parts = line.split()
        if len(parts) == 4:
            sizes[parts[3]] = int(parts[1], 16)
    return sizes


def count_instructions(elf: Path) -> Counter:
    """How often each instruction address ran: ``Trace 0: 0x... [cs_base/pc/flags/cflags] ...``."""
    done = subprocess.run(
        ["qemu-system-arm", "-M", "mps2-an386", "-nographic", "-semihosting", "-singlestep"]
        + ["-d", "exec,nochain", "-D", "/dev/stdout", "-kernel", str(elf)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if "selftest passed" not in done.stdout + done.stderr:
        sys.exit(f"{elf.name} under qemu: no 'selftest passed' (exit {done.returncode}): {done.stderr[-2000:]}")
    return Counter(
        int(line.split("[", 1)[1].split("/")[1], 16) for line in done.stdout.splitlines() if line.startswith("Trace ")
    )


def by_function(elf: Path, counts: Counter) -> Counter:
    """``counts`` summed per function of ``elf`` (its symbol table's function symbols)."""
    nm = shutil.which("llvm-nm") or shutil.which("arm-none-eabi-nm")
    if nm is None:
        return Counter()
    done = subprocess.run([nm, "-S", str(elf)], capture_output=True, text=True, check=True)
    functions = []
    for line in done.stdout.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2] in "Tt":
            functions.append((int(parts[0], 16) & ~1, int(parts[1], 16), parts[3]))
    totals: Counter = Counter()
    for pc, n in counts.items():
        name = next((f for start, size, f in functions if start <= pc < start + size), "other")
        totals[name] += n
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", default=None, help="a multirotor checkpoint (.npz); default: untrained")
    parser.add_argument("--runs", type=int, default=4, help="controller() calls counted (cycling the test vectors)")
    args = parser.parse_args()
    if shutil.which("qemu-system-arm") is None:
        sys.exit("needs qemu-system-arm: apt-get install qemu-system-arm")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.checkpoint is None:
            import dispatchrl as drl
            from dispatchrl.algorithms import td3
            from dispatchrl.training.envspec import resolve_env
            from dispatchrl.training.runs import build_state, save_run

            # the recipe's network (146-64-64-4, tanh), untrained; a short budget keeps the replay small
            spec = resolve_env("multirotor")
            config = dataclasses.replace(td3.config_for("multirotor"), total_steps=200)
            save_run(work / "run", "td3", spec, config, 0, 0, build_state(td3, drl.Generic(), spec, config, 0))
            checkpoint = work / "run.npz"
        else:
            checkpoint = Path(args.checkpoint)
        from dispatchrl.cli import main as cli

        cli(["export", "--checkpoint", str(checkpoint), "--out", str(work / "out"), "--target", "cortex-m4"])
        out = work / "out"
        obj = out / "policy-cortex-m4.o"
        sections = {s["name"]: s["size"] for s in elf_sections(obj) if s["flags"] & 0x2 and s["size"]}  # SHF_ALLOC
        symbols = symbol_sizes(obj)
        vectors = symbols.get("policy_test_observations", 0) + symbols.get("policy_test_actions", 0)

        command, flags = export.target_compiler("cortex-m4")
        (out / "startup.c").write_text(startup_runtime())
        (out / "main.c").write_text("int semihost(int op, const void *arg);\n" + MAIN_C)
        (out / "tanhf.c").write_text(TANHF_C)
        (out / "m4.ld").write_text(LINKER_SCRIPT)
        counts, functions = {}, {}
        for runs in (0, args.runs):
            elf = out / f"bench{runs}.elf"
            run_compiler(
                command,
                [*COMMON_FLAGS, *flags, "-I", str(out), f"-DRUNS={runs}", "-T", str(out / "m4.ld")]
                + [str(out / f) for f in ("startup.c", "main.c", "tanhf.c")]
                + [str(obj), "-o", str(elf)],
                f"the Cortex-M4 benchmark ({runs} runs)",
            )
            counts[runs] = count_instructions(elf)
            functions[runs] = by_function(elf, counts[runs])
        per_call = (counts[args.runs].total() - counts[0].total()) / args.runs
        per_function = {
            name: (functions[args.runs][name] - functions[0][name]) / args.runs
            for name in functions[args.runs]
            if functions[args.runs][name] != functions[0][name]
        }
        print(
            json.dumps(
                {
                    "checkpoint": str(args.checkpoint or "untrained 146-64-64-4 TD3 multirotor policy"),
                    "compiler": " ".join(command) + " " + " ".join([*COMMON_FLAGS, *flags]),
                    "object_bytes": {
                        "sections": sections,
                        "test_vectors_in_rodata": vectors,
                        "rodata_without_test_vectors": sections.get(".rodata", 0) - vectors,
                        "functions": {
                            k: symbols[k] for k in ("policy_forward", "policy_selftest", "controller") if k in symbols
                        },
                        "tanhf_not_included": "undefined in the object: libm's (here musl's) adds its own size",
                    },
                    "board": "qemu-system-arm -M mps2-an386 (Cortex-M4F)",
                    "instructions_per_controller_call": per_call,
                    "instructions_per_call_by_function": per_function,
                    "instructions_total": {str(k): v.total() for k, v in counts.items()},
                    "measured": (
                        f"instructions executed, counted exactly (qemu -singlestep -d exec,nochain: one line "
                        f"per guest instruction), program with {args.runs} controller() calls minus the same "
                        "program with 0, over the calls; includes the call, the loop and musl's tanhf "
                        "(128 per call). Not cycles: qemu is not cycle-accurate"
                    ),
                }
            )
        )


if __name__ == "__main__":
    main()
