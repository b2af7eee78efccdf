"""Headline benchmark: dispatchrl TD3 vs RLtools TD3 on Pendulum-v1 (10,000 steps), and SAC vs
RLtools SAC likewise (--algos, default td3,sac).

Builds the native anchors benchmarks/rltools_td3_pendulum.cpp and rltools_sac_pendulum.cpp (both
include the shared rltools_pendulum_types.h and main rltools_pendulum_main.h) against the headers
shipped in the `rltools` PyPI package (rltools/external/rl_tools/include) with OpenBLAS, one thread:

    g++ -O3 -march=native -ffast-math -std=c++17 -DRL_TOOLS_BACKEND_ENABLE_OPENBLAS \\
        -DDRL_STEPS=<steps> -I <include> rltools_td3_pendulum.cpp -o <cache>/rltools_td3_pendulum -lopenblas

then runs it and `python -m dispatchrl train <algo> --env pendulum --steps <steps> --seed S --json`
alternately (RLtools, dispatchrl) for --pairs pairs (seed = pair index) and prints one JSON line
per run and, per algorithm, a JSON line with the median ratio of training-loop seconds
(dispatchrl / RLtools, target <= 0.7), for TD3 dispatchrl's cold-cache compile seconds (one run
with an empty DISPATCHRL_CACHE_DIR and NUMBA_CACHE_DIR, target <= 20 s), and the warm end-to-end
command seconds. Both sides run with OPENBLAS/OMP/MKL_NUM_THREADS = --blas-threads (default 1).

Where the headers come from, first match wins:
  --rltools-include DIR, or $RLTOOLS_INCLUDE;
  the `rltools` package importable by this interpreter (if the C++ main compiles against it);
  a pinned copy pip-installed on demand into ~/.cache/dispatchrl/rltools/pkg-<version>
  (`python -m pip install --no-deps --target ...`; --no-install turns that off).
Build outputs go to ~/.cache/dispatchrl/rltools/build-<hash> ($DISPATCHRL_RLTOOLS_CACHE
overrides the root), never into the repository. OpenBLAS: `apt-get install libopenblas-dev`.

Before that, for each of --startup-algos (default td3, sac, ppo), it times the whole command
cold (fresh DISPATCHRL_CACHE_DIR and NUMBA_CACHE_DIR in a temp dir), then with only the kernels
cached (the fused steps removed: a first run with kernels compiled ahead), then warm (the same
caches, filled): one JSON line per run ("run": "startup", "cache": "cold"/"kernels"/"warm") and a
summary line ("benchmark": "startup") of medians; with --baseline both checkouts alternate in the same window.

With --log-dir DIR every dispatchrl run logs its metrics (--logger, default csv,tensorboard) under
DIR: logging's cost is this run's training seconds against a run without it.

    python benchmarks/td3_vs_rltools.py [--pairs 5] [--steps 10000] [--skip-cold]
                                        [--algos td3,sac] [--startup-algos td3,sac,ppo] [--startup-repeats 1]
                                        [--startup-only]
                                        [--rltools-only] [--timeout 600] [--baseline DIR] [--emulate-avx2]

stdout carries only JSON lines; progress goes to stderr. Exit status: 0 when the comparison ran
(whether or not the target is met), 1 when the RLtools side could not be built, 2 when the
dispatchrl command failed (the RLtools runs are still reported).
"""

import argparse
import glob
import hashlib
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CPP_MAINS = {algo: os.path.join(HERE, f"rltools_{algo}_pendulum.cpp") for algo in ("td3", "sac")}
SHARED_HEADERS = [os.path.join(HERE, f"rltools_pendulum_{part}.h") for part in ("types", "main")]  # both include them
RLTOOLS_VERSION = "2.2.1"  # the version the C++ main was written against (pip-installed on demand)
CXXFLAGS = ["-O3", "-march=native", "-ffast-math", "-std=c++17", "-DRL_TOOLS_BACKEND_ENABLE_OPENBLAS"]
# --emulate-avx2: an AVX2 machine on an AVX-512 one. Numba compiles for Haswell with its own
# features only (NUMBA_CPU_FEATURES empty; NUMBA_CPU_NAME alone keeps the host's AVX-512), both
# sides' OpenBLAS runs its Haswell kernels, and RLtools is built with -march=haswell.
AVX2_EMULATION_ENV = {"NUMBA_CPU_NAME": "haswell", "NUMBA_CPU_FEATURES": "", "OPENBLAS_CORETYPE": "Haswell"}
RATIO_TARGET = 0.7
COLD_COMPILE_TARGET = 20.0
REQUIRED_KEYS = ("algo", "env", "device", "seed", "steps", "train_seconds", "compile_seconds", "eval_return")


class BenchmarkError(RuntimeError):
    pass


def log(*parts):
    print("[td3_vs_rltools]", *parts, file=sys.stderr, flush=True)


def emit(record):
    print(json.dumps(record), flush=True)


def cache_root():
    root = os.environ.get("DISPATCHRL_RLTOOLS_CACHE")
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "dispatchrl", "rltools")
    os.makedirs(root, exist_ok=True)
    return root


def thread_env(blas_threads, extra=None):
    env = dict(os.environ)
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[name] = str(blas_threads)
    env.update(extra or {})
    return env


# --------------------------------------------------------------------------------------------
# RLtools side: find headers, build, run
# --------------------------------------------------------------------------------------------


def include_from_package_dir(pkg_dir):
    inc = os.path.join(pkg_dir, "external", "rl_tools", "include")
    return inc if os.path.isfile(os.path.join(inc, "rl_tools", "version.h")) else None


def package_version(pkg_dir):
    """Version from the dist-info next to the package (no import: rltools' __init__ may do work)."""
    parent = os.path.dirname(pkg_dir)
    try:
        for name in os.listdir(parent):
            if name.startswith("rltools-") and name.endswith(".dist-info"):
                return name[len("rltools-") : -len(".dist-info")]
    except OSError:
        pass
    return None


def importable_rltools():
    try:
        spec = importlib.util.find_spec("rltools")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        inc = include_from_package_dir(location)
        if inc:
            return {
                "include": inc,
                "source": "importable rltools package",
                "package_dir": location,
                "version": package_version(location),
            }
    return None


def pinned_rltools(allow_install):
    target = os.path.join(cache_root(), f"pkg-{RLTOOLS_VERSION}")
    pkg_dir = os.path.join(target, "rltools")
    inc = include_from_package_dir(pkg_dir)
    if inc is None:
        command = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--disable-pip-version-check",
            "--target",
            target,
            f"rltools=={RLTOOLS_VERSION}",
        ]
        if not allow_install:
            raise BenchmarkError(
                "RLtools headers not found. Install them with\n    "
                + " ".join(command)
                + "\nor `pip install rltools`, or pass --rltools-include DIR."
            )
        log("installing rltools", RLTOOLS_VERSION, "into", target)
        shutil.rmtree(target, ignore_errors=True)
        result = subprocess.run(command, capture_output=True, text=True)
        inc = include_from_package_dir(pkg_dir)
        if result.returncode != 0 or inc is None:
            raise BenchmarkError(
                "pip could not install rltools:\n"
                + result.stdout[-2000:]
                + result.stderr[-2000:]
                + "\nInstall it yourself (`pip install rltools`) or pass --rltools-include DIR."
            )
    return {
        "include": inc,
        "source": f"pip --target cache (rltools=={RLTOOLS_VERSION})",
        "package_dir": pkg_dir,
        "version": RLTOOLS_VERSION,
    }


def find_compiler():
    for name in (os.environ.get("CXX"), "g++", "c++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    raise BenchmarkError("no C++ compiler found (need g++ with C++17; `apt-get install g++`)")


def build(cxx, include, steps, algo):
    """Compile the C++ main into the cache (reused when source, headers, flags and steps match)."""
    source = b""
    for path in (CPP_MAINS[algo], *SHARED_HEADERS):
        with open(path, "rb") as f:
            source += f.read()
    with open(os.path.join(include, "rl_tools", "version.h"), "rb") as f:
        version_h = f.read()
    compiler_id = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout.splitlines()[:1]
    flags = CXXFLAGS + [f"-DDRL_STEPS={steps}"]
    key = hashlib.sha256(repr((source, version_h, include, flags, compiler_id, os.uname().machine)).encode())
    out_dir = os.path.join(cache_root(), "build-" + key.hexdigest()[:16])
    binary = os.path.join(out_dir, f"rltools_{algo}_pendulum")
    command = [cxx] + flags + ["-I", include, CPP_MAINS[algo], "-o", binary, "-lopenblas"]
    info = {"compile_command": " ".join(command), "binary": binary, "compiler": (compiler_id or ["?"])[0]}
    if os.path.isfile(binary):
        info.update(cached=True, compile_seconds=None)
        return info
    os.makedirs(out_dir, exist_ok=True)
    log(f"compiling RLtools {algo.upper()} Pendulum main:", " ".join(command))
    start = time.perf_counter()
    result = subprocess.run(command[:-3] + ["-o", binary + ".tmp", "-lopenblas"], capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        text = result.stderr
        if "lopenblas" in text or "cannot find -l" in text:
            raise BenchmarkError(
                "linking OpenBLAS failed; install it with `apt-get install libopenblas-dev`\n" + text[-2000:]
            )
        raise BenchmarkError("compiling the RLtools main failed:\n" + text[-4000:])
    os.replace(binary + ".tmp", binary)
    info.update(cached=False, compile_seconds=round(seconds, 2))
    return info


def prepare_rltools(args, steps, algo):
    cxx = find_compiler()
    explicit = args.rltools_include or os.environ.get("RLTOOLS_INCLUDE")
    if explicit:
        candidates = [{"include": os.path.abspath(explicit), "source": "explicit include dir", "version": None}]
    else:
        candidates = [c for c in (importable_rltools(),) if c]
    errors = []
    for candidate in candidates:
        try:
            return dict(candidate, **build(cxx, candidate["include"], steps, algo))
        except BenchmarkError as e:
            errors.append(f"{candidate['source']} ({candidate['include']}): {e}")
            if "OpenBLAS" in str(e):
                raise
            log("could not build against", candidate["include"], "- trying the pinned rltools", RLTOOLS_VERSION)
    if explicit:
        raise BenchmarkError("\n".join(errors))
    candidate = pinned_rltools(allow_install=not args.no_install)
    return dict(candidate, **build(cxx, candidate["include"], steps, algo))


def last_json_line(text):
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


def run_rltools(binary, seed, args):
    start = time.perf_counter()
    result = subprocess.run(
        [binary, str(seed)], capture_output=True, text=True, timeout=args.timeout, env=thread_env(args.blas_threads)
    )
    wall = time.perf_counter() - start
    record = last_json_line(result.stdout)
    if result.returncode != 0 or record is None:
        raise BenchmarkError(
            f"RLtools run failed (exit {result.returncode}):\n{result.stdout[-2000:]}{result.stderr[-2000:]}"
        )
    return {
        "run": "rltools",
        "seed": seed,
        "steps": record["steps"],
        "train_seconds": record["train_seconds"],
        "eval_return": record.get("eval_return"),
        "command_seconds": round(wall, 3),
        "backend": record.get("backend"),
    }


# --------------------------------------------------------------------------------------------
# dispatchrl side
# --------------------------------------------------------------------------------------------


def summary_line(error):
    """First line of an error plus the last line of the tool's stderr (the exception, usually)."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    if not lines:
        return "unknown error"
    return lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"


def run_dispatchrl(seed, args, extra_env=None, label="dispatchrl", repo=REPO, algo="td3", training_only=True):
    command = [
        args.python,
        "-m",
        "dispatchrl",
        "train",
        algo,
        "--env",
        "pendulum",
        "--steps",
        str(args.steps),
        "--seed",
        str(seed),
        "--set",
        "gamma=0.99",  # RLtools' γ (dispatchrl's TD3 default on Pendulum is rl-zoo's 0.98)
        "--json",
    ]
    if training_only and "--keep-best" in Path(repo, "dispatchrl", "cli.py").read_text():
        command += ["--keep-best", "0"]  # training only, as RLtools times it (no evaluations between chunks)
    if getattr(args, "log_dir", None):  # metrics logging on (its cost: compare with a run without)
        command += ["--log-dir", os.path.join(args.log_dir, f"{label}-{algo}-seed{seed}"), "--logger", args.logger]
    env = thread_env(args.blas_threads, extra_env)
    env["PYTHONPATH"] = repo + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    start = time.perf_counter()
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout, env=env, cwd=repo)
    except subprocess.TimeoutExpired:
        raise BenchmarkError(f"`{' '.join(command[1:])}` timed out after {args.timeout} s") from None
    wall = time.perf_counter() - start
    record = last_json_line(result.stdout)
    if result.returncode != 0 or record is None:
        raise BenchmarkError(
            f"`{' '.join(command[1:])}` failed (exit {result.returncode}):\n"
            f"{result.stdout[-1500:]}{result.stderr[-2500:]}"
        )
    missing = [k for k in REQUIRED_KEYS if k not in record]
    if missing:
        raise BenchmarkError(f"dispatchrl's JSON line lacks {missing}: {record}")
    out = {
        "run": label,
        "seed": seed,
        "steps": record["steps"],
        "train_seconds": record["train_seconds"],
        "compile_seconds": record["compile_seconds"],
        "eval_return": record["eval_return"],
        "command_seconds": round(wall, 3),
        "device": record["device"],
    }
    # PPO trains whole rollouts (64 envs × 128 steps on Pendulum): 10000 steps run as 8192
    ran_whole_rollouts = algo == "ppo" and 0 < record["steps"] <= args.steps
    if (record["steps"] != args.steps and not ran_whole_rollouts) or record["algo"] != algo:
        raise BenchmarkError(f"dispatchrl ran something else than {algo} for {args.steps} steps: {record}")
    return out


def cold_run(args):
    """One dispatchrl run with empty staging and Numba caches (a temp dir, removed afterwards)."""
    tmp = tempfile.mkdtemp(prefix="dispatchrl-cold-")
    try:
        return run_dispatchrl(
            0,
            args,
            {"DISPATCHRL_CACHE_DIR": os.path.join(tmp, "dispatchrl"), "NUMBA_CACHE_DIR": os.path.join(tmp, "numba")},
            label="dispatchrl-cold",
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


#: cold: empty caches; kernels: every kernel cached, the fused steps not (what a first run would
#: cost with the kernels compiled ahead, e.g. shipped per ISA); warm: everything cached
STARTUP_CACHES = ("cold", "kernels", "warm")


def forget_fused_steps(caches):
    """Remove the generated fused steps and their Numba cache entries, keeping the kernels'."""
    removed = glob.glob(os.path.join(caches["NUMBA_CACHE_DIR"], "*", "fused_*"))
    removed += glob.glob(os.path.join(caches["DISPATCHRL_CACHE_DIR"], "fused"))
    if not removed:
        raise BenchmarkError(f"no cached fused step found under {caches}: the cache layout changed")
    for path in removed:
        shutil.rmtree(path)


def startup_runs(args, label, repo):
    """Cold, kernels-only and warm command wall time per algorithm: the cold run starts from empty
    DISPATCHRL_CACHE_DIR and NUMBA_CACHE_DIR (a temp dir), the next one from its kernels only (see
    STARTUP_CACHES), the warm run reuses everything. Yields one record per run."""
    for algo in args.startup_algos:
        tmp = tempfile.mkdtemp(prefix="dispatchrl-startup-")
        caches = {
            "DISPATCHRL_CACHE_DIR": os.path.join(tmp, "dispatchrl"),
            "NUMBA_CACHE_DIR": os.path.join(tmp, "numba"),
        }
        try:
            for cache in STARTUP_CACHES:
                if cache == "kernels":
                    forget_fused_steps(caches)
                # the command as a new user runs it, its --keep-best evaluations included
                record = run_dispatchrl(0, args, caches, label=label, repo=repo, algo=algo, training_only=False)
                yield dict(record, run="startup", label=label, algo=algo, cache=cache)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def startup(args):
    """The --startup-algos phase: cold and warm runs of this checkout (and of --baseline, run
    alternately in the same window), then one summary line of medians per algorithm."""
    repos = [("dispatchrl", REPO)] + ([("baseline", os.path.abspath(args.baseline))] if args.baseline else [])
    records = []
    for _ in range(args.startup_repeats):
        for label, repo in repos:
            log(f"cold and warm runs of {', '.join(args.startup_algos)} ({label}: {repo})")
            for record in startup_runs(args, label, repo):
                emit(record)
                records.append(record)
    summary = {"benchmark": "startup", "steps": args.steps, "repeats": args.startup_repeats, "cpu": cpu_model()}
    summary["isa"] = isa(args)
    for label, _ in repos:
        for algo in args.startup_algos:
            for cache in STARTUP_CACHES:
                runs = [r for r in records if (r["label"], r["algo"], r["cache"]) == (label, algo, cache)]
                key = f"{label}_{algo}_{cache}"
                summary[key + "_command_seconds_median"] = median([r["command_seconds"] for r in runs])
                summary[key + "_compile_seconds_median"] = median([r["compile_seconds"] for r in runs])
                summary[key + "_train_seconds_median"] = median([r["train_seconds"] for r in runs])
    emit(summary)


def isa(args):
    return "avx2 (emulated: haswell)" if args.emulate_avx2 else "native"


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def median(values):
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 4) if values else None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--algos", default="td3,sac", help="algorithms compared with RLtools, in turn (comma list; default td3,sac)"
    )
    p.add_argument("--pairs", type=int, default=5, help="alternating (RLtools, dispatchrl) pairs, >= 3 (default 5)")
    p.add_argument("--steps", type=int, default=10000, help="environment steps per training run (default 10000)")
    p.add_argument("--skip-cold", action="store_true", help="skip the cold-cache dispatchrl run")
    p.add_argument("--rltools-only", action="store_true", help="only build and time RLtools")
    p.add_argument(
        "--startup-algos",
        default="td3,sac,ppo",
        help="algorithms whose cold and warm command wall time is measured first (comma list; "
        "'' skips; default td3,sac,ppo)",
    )
    p.add_argument("--startup-repeats", type=int, default=1, help="cold+warm rounds per algorithm (default 1)")
    p.add_argument("--startup-only", action="store_true", help="only the cold/warm startup runs, no RLtools")
    p.add_argument("--rltools-include", help="RLtools include dir (the one containing rl_tools/)")
    p.add_argument("--no-install", action="store_true", help="never pip-install rltools; fail with instructions")
    p.add_argument(
        "--emulate-avx2",
        action="store_true",
        help="on an AVX-512 machine, time both sides as on an AVX2 one: Numba and RLtools for Haswell, "
        "OpenBLAS's Haswell kernels (the figures say so: isa)",
    )
    p.add_argument("--blas-threads", type=int, default=1, help="OPENBLAS/OMP/MKL_NUM_THREADS for both (default 1)")
    p.add_argument("--timeout", type=float, default=600, help="seconds allowed per command (default 600)")
    p.add_argument(
        "--python",
        default=sys.executable,
        help="interpreter that runs `-m dispatchrl` (default: this one); the repo is put on PYTHONPATH",
    )
    p.add_argument(
        "--baseline",
        metavar="DIR",
        help="another dispatchrl checkout (e.g. a git worktree of the previous commit) timed in every "
        "pair too: before/after of a change in one run (ratio this/baseline)",
    )
    p.add_argument(
        "--log-dir",
        metavar="DIR",
        help="dispatchrl runs log metrics under DIR/<run>-seed<S> (--logger backends): run once with "
        "and once without to see logging's cost on the same machine",
    )
    p.add_argument("--logger", default="csv,tensorboard", help="with --log-dir: the backends (default csv,tensorboard)")
    args = p.parse_args(argv)
    if args.emulate_avx2:
        os.environ.update(AVX2_EMULATION_ENV)  # every command below inherits it
        CXXFLAGS[CXXFLAGS.index("-march=native")] = "-march=haswell"
    if args.pairs < 3:
        p.error("--pairs must be at least 3")
    args.startup_algos = [a for a in args.startup_algos.split(",") if a]
    args.algos = [a for a in args.algos.split(",") if a]
    unknown = sorted(set(args.algos) - set(CPP_MAINS))
    if unknown:
        p.error(f"--algos: no RLtools anchor for {unknown} (have {sorted(CPP_MAINS)})")
    if args.startup_algos and not args.rltools_only:
        try:
            startup(args)
        except BenchmarkError as e:
            log(str(e))
            emit({"benchmark": "startup", "error": summary_line(e)})
            return 2
    if args.startup_only:
        return 0

    codes = [compare(args, algo) for algo in args.algos]
    return max(codes, default=0)


def compare(args, algo):
    """RLtools and dispatchrl ``algo`` in alternating pairs: one JSON line per run, then the
    summary line; returns the exit status (see the module)."""
    try:
        rlt = prepare_rltools(args, args.steps, algo)
    except BenchmarkError as e:
        log(str(e))
        emit({"benchmark": "td3_vs_rltools", "algo": algo, "error": "rltools: " + summary_line(e)})
        return 1
    emit(
        {
            "run": "rltools-build",
            "algo": algo,
            "rltools_version": rlt.get("version"),
            "headers": rlt["source"],
            "include": rlt["include"],
            "compile_command": rlt["compile_command"],
            "compiler": rlt["compiler"],
            "cached": rlt["cached"],
            "compile_seconds": rlt["compile_seconds"],
        }
    )

    dispatchrl_error = None
    cold = None
    if algo == "td3" and not args.rltools_only and not args.skip_cold:  # the others: --startup-algos
        log("cold-cache dispatchrl run (empty DISPATCHRL_CACHE_DIR and NUMBA_CACHE_DIR)")
        try:
            cold = cold_run(args)
            emit(cold)
        except BenchmarkError as e:
            dispatchrl_error = str(e)
    if not args.rltools_only and dispatchrl_error is None:
        log("warm-up dispatchrl run (fills the regular caches; not counted)")
        try:
            emit(run_dispatchrl(0, args, label="dispatchrl-warmup", algo=algo))
            if args.baseline:
                emit(run_dispatchrl(0, args, label="baseline-warmup", repo=os.path.abspath(args.baseline), algo=algo))
        except BenchmarkError as e:
            dispatchrl_error = str(e)
    if dispatchrl_error:
        log(dispatchrl_error)
        log("dispatchrl side unavailable: timing RLtools only")
        emit({"run": "dispatchrl", "algo": algo, "error": summary_line(dispatchrl_error)})
    run_rltools(rlt["binary"], 0, args)  # warm-up (page cache, OpenBLAS init); not counted

    rl_runs, drl_runs, ratios, baseline_ratios = [], [], [], []
    for i in range(args.pairs):
        seed = i
        try:
            r = run_rltools(rlt["binary"], seed, args)
        except (BenchmarkError, subprocess.TimeoutExpired) as e:
            log(str(e))
            emit({"benchmark": "td3_vs_rltools", "algo": algo, "error": "rltools run: " + summary_line(e)})
            return 1
        r["pair"], r["algo"] = i, algo
        emit(r)
        rl_runs.append(r)
        if dispatchrl_error is None and not args.rltools_only:
            try:
                d = run_dispatchrl(seed, args, algo=algo)
            except BenchmarkError as e:
                dispatchrl_error = str(e)
                log(dispatchrl_error)
                emit({"run": "dispatchrl", "pair": i, "error": summary_line(dispatchrl_error)})
                continue
            d["pair"], d["algo"] = i, algo
            d["ratio"] = round(d["train_seconds"] / r["train_seconds"], 4)
            emit(d)
            drl_runs.append(d)
            ratios.append(d["ratio"])
            if args.baseline:
                try:
                    b = run_dispatchrl(seed, args, label="baseline", repo=os.path.abspath(args.baseline), algo=algo)
                except BenchmarkError as e:
                    log(str(e))
                    emit({"run": "baseline", "pair": i, "error": summary_line(e)})
                    continue
                b["pair"], b["algo"] = i, algo
                b["ratio_to_baseline"] = round(d["train_seconds"] / b["train_seconds"], 4)
                emit(b)
                baseline_ratios.append(b["ratio_to_baseline"])

    ratio = median(ratios) if len(ratios) >= 3 else None
    summary = {
        "benchmark": "td3_vs_rltools",
        "env": "pendulum",
        "algo": algo,
        "steps": args.steps,
        "pairs": len(ratios),
        "blas_threads": args.blas_threads,
        "cpu": cpu_model(),
        "isa": isa(args),
        "ratio_median": ratio,
        "ratio_target": RATIO_TARGET,
        "meets_ratio_target": None if ratio is None else ratio <= RATIO_TARGET,
        "rltools_train_seconds": [r["train_seconds"] for r in rl_runs],
        "rltools_train_seconds_median": median([r["train_seconds"] for r in rl_runs]),
        "rltools_eval_return_median": median([r["eval_return"] for r in rl_runs]),
        "dispatchrl_train_seconds": [d["train_seconds"] for d in drl_runs],
        "dispatchrl_train_seconds_median": median([d["train_seconds"] for d in drl_runs]),
        "dispatchrl_eval_return_median": median([d["eval_return"] for d in drl_runs]),
        "dispatchrl_device": drl_runs[0]["device"] if drl_runs else None,
        "cold_compile_seconds": cold["compile_seconds"] if cold else None,
        "cold_command_seconds": cold["command_seconds"] if cold else None,
        "cold_compile_target": COLD_COMPILE_TARGET,
        "meets_cold_compile_target": None if not cold else cold["compile_seconds"] <= COLD_COMPILE_TARGET,
        "warm_command_seconds_median": median([d["command_seconds"] for d in drl_runs]),
        "rltools_version": rlt.get("version"),
        "rltools_compile_command": rlt["compile_command"],
    }
    if args.baseline:
        summary.update(
            baseline=os.path.abspath(args.baseline),
            ratio_to_baseline_median=median(baseline_ratios),
            ratios_to_baseline=baseline_ratios,
        )
    if dispatchrl_error and not args.rltools_only:
        summary["dispatchrl_error"] = summary_line(dispatchrl_error)
    emit(summary)
    if ratio is not None:
        log(
            f"{algo}: median training-loop ratio dispatchrl/RLtools = {ratio:.3f} (target <= {RATIO_TARGET}); "
            f"RLtools {summary['rltools_train_seconds_median']} s, dispatchrl {summary['dispatchrl_train_seconds_median']} s"
        )
    return 2 if (dispatchrl_error and not args.rltools_only) else 0


if __name__ == "__main__":
    sys.exit(main())
