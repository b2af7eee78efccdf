#!/usr/bin/env bash
# The checks that need a real NVIDIA GPU (issues #13, #33), about 9 minutes on one H100 with 16
# cores (Nov 27: 3 of tests, then the rows; TD3's and PPO's fused CUDA steps compile for 131 and 86 s),
# just inside one 600 s device call: BASELINE rows need a call of their own (TESTS=0 skips the
# tests). CI has none and runs CUDA in numba's simulator; run this on a GPU machine and keep
# its output with the measurements:
#     PYTHON=python3 [BASELINE=/path/to/other/checkout] bash benchmarks/gpu_check.sh 2>&1 | tee gpu_check.log
# 1. versions and device;
# 2. in parallel: the CUDA tests on hardware (one pytest per file or filter) while the CPU rows' kernels are
#    compiled into Numba's disk cache (untimed, CUDA hidden), so the timed rows below load them;
# 3. timed, one at a time: `dispatchrl demo --json`; the demo step's cycles call by call
#    (benchmarks/cuda_profile.py); benchmarks/cpu_vs_gpu.py (the demo step and the
#    dense layer 1024 x 4096 for dispatchrl CPU and CUDA, JAX and PyTorch in the same run); TD3
#    Pendulum 10k steps and PPO Pendulum (PPO_STEPS) on CPU and CUDA;
# 4. with BASELINE: the demo and the TD3/PPO CUDA rows again for that tree (its own PYTHONPATH and
#    working folder), so old and new kernels compare on the same machine.
# Every JSON line gets "tree": "new" or "baseline"; after each step a {"bench": "wall", ...} line
# gives its wall seconds and exit status. Each step runs under `timeout`; the exit status is 1 if
# any step failed. PYTHON: the interpreter (default python); PEER_PYTHON: the one with jax/torch
# (default PYTHON); TESTS=0 skips the tests; TD3_STEPS, PPO_STEPS (and BASELINE_TD3_STEPS,
# BASELINE_PPO_STEPS, default the same) change the run lengths.
set -uo pipefail
BASELINE=${BASELINE:-}
if [ -n "$BASELINE" ]; then # absolute, from the caller's folder
    if [ ! -d "$BASELINE/dispatchrl" ]; then
        echo "BASELINE=$BASELINE has no dispatchrl/ folder" >&2
        exit 2
    fi
    BASELINE=$(cd "$BASELINE" && pwd)
fi
cd "$(dirname "$0")/.."
TREE=$PWD
PYTHON=${PYTHON:-python}
PEER_PYTHON=${PEER_PYTHON:-$PYTHON}
TESTS=${TESTS:-1}
TD3_STEPS=${TD3_STEPS:-10000}
PPO_STEPS=${PPO_STEPS:-1310720} # 160 iterations of 64 envs x 128 steps (a quarter of the default)
BASELINE_TD3_STEPS=${BASELINE_TD3_STEPS:-$TD3_STEPS} # the old kernels took ~44 s for TD3 10k on an H100
BASELINE_PPO_STEPS=${BASELINE_PPO_STEPS:-$PPO_STEPS}
PATH_REST=${PYTHONPATH:-}       # what the caller put on PYTHONPATH (e.g. /tmp/site) stays after the tree
export NUMBA_ENABLE_CUDASIM=0 PYTHONUNBUFFERED=1
LOGS=$(mktemp -d)
status=0
started=$(date +%s)

# in TREE with its PYTHONPATH (python -m puts the working folder first on sys.path, so both matter)
in_tree() {
    local dir=$1
    shift
    (cd "$dir" && PYTHONPATH="$dir${PATH_REST:+:$PATH_REST}" "$@")
}

# step TAG DIR SECONDS COMMAND...: run it under timeout, tag its JSON lines, then a wall-time line
step() {
    local tag=$1 dir=$2 limit=$3
    shift 3
    echo "== [$tag] $* (limit ${limit} s, $(($(date +%s) - started)) s into the run)"
    local start rc ms
    start=$(date +%s%N)
    in_tree "$dir" timeout -k 10 "$limit" "$@" 2>&1 | sed -u "s/^{/{\"tree\": \"$tag\", /"
    rc=${PIPESTATUS[0]}
    ms=$((($(date +%s%N) - start) / 1000000))
    printf '{"tree": "%s", "bench": "wall", "step": "%s", "seconds": %d.%03d, "rc": %d}\n' \
        "$tag" "$*" $((ms / 1000)) $((ms % 1000)) "$rc"
    [ "$rc" -eq 0 ] || status=1
}

echo "== versions and device"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader || status=1
in_tree "$TREE" timeout 60 $PYTHON - <<'PY' || status=1
import importlib.metadata as metadata, sys
import numba, numpy
from numba import cuda
def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
print({"python": sys.version.split()[0], "numba": numba.__version__, "numba-cuda": version("numba-cuda"),
       "numpy": numpy.__version__, "plum": version("plum-dispatch"), "device": str(cuda.get_current_device().name)})
PY

warm_cpu() { # compile the CPU rows' kernels into the tree's Numba cache, untimed and without CUDA
    local dir=$1
    CUDA_VISIBLE_DEVICES= in_tree "$dir" timeout 240 $PYTHON -m dispatchrl.cli train td3 --env pendulum \
        --device cpu --steps 300 --no-eval --json
    CUDA_VISIBLE_DEVICES= in_tree "$dir" timeout 240 $PYTHON -m dispatchrl.cli train ppo --env pendulum \
        --device cpu --steps 8192 --no-eval --json
    CUDA_VISIBLE_DEVICES= in_tree "$dir" timeout 240 $PYTHON -m dispatchrl.cli demo --steps 2 --json
}
warm_pids=()
warm_cpu "$TREE" >"$LOGS/warm-new.log" 2>&1 &
warm_pids+=($!)
if [ -n "$BASELINE" ]; then
    warm_cpu "$BASELINE" >"$LOGS/warm-baseline.log" 2>&1 &
    warm_pids+=($!)
fi

if [ "$TESTS" != 0 ]; then
    echo "== CUDA tests on hardware, one pytest per file (or filter) in parallel"
    # every test file with CUDA cases: on an H100 (Nov 26) the kernels', fuzz and multirotor files
    # found what the simulator cannot (launch limits, FMA contraction); ~2 min on 16 cores
    test_pids=()
    specs=("test_kernels:cuda" "test_cuda_fused:demo or td3-pendulum or matches_launch" "test_cuda_fused:sac"
        "test_cuda_fused:ppo" "test_cuda_fused:td3-acrobot or dqn or cartpole"
        "test_cuda_fused:not (demo or td3 or sac or ppo or dqn or cartpole or matches_launch)" "test_ppo:cuda" "test_rl_kernels:cuda"
        "test_replay_kernels:cuda" "test_cuda_arguments:cuda" "test_aliasing:cuda" "test_fuse_tensordict:cuda"
        "test_gae:cuda" "test_fuzz:cuda" "test_multirotor_cuda:cuda" "test_dqn:cuda" "test_nstep_memmap_offpolicy:cuda")
    for i in "${!specs[@]}"; do
        spec=${specs[$i]}
        in_tree "$TREE" timeout -k 10 240 $PYTHON -m pytest "tests/${spec%%:*}.py" -k "${spec#*:}" -q \
            -p no:cacheprovider -o addopts="" >"$LOGS/test$i.log" 2>&1 &
        test_pids+=($!)
    done
    for i in "${!specs[@]}"; do
        wait "${test_pids[$i]}"
        rc=$?
        echo "-- ${specs[$i]}: exit $rc ($(($(date +%s) - started)) s into the run): $(tail -n 1 "$LOGS/test$i.log")"
        [ "$rc" -eq 0 ] || grep -E "^(FAILED|ERROR)|^E  " "$LOGS/test$i.log" | head -20
        [ "$rc" -eq 0 ] || status=1
    done
fi
for pid in "${warm_pids[@]}"; do
    wait "$pid" || echo "(a cache warm-up failed; its rows compile when timed: see compile_seconds)"
done

step new "$TREE" 90 $PYTHON -m dispatchrl.cli demo --json
step new "$TREE" 90 $PYTHON benchmarks/cuda_profile.py --programs demo --top 12
step new "$TREE" 150 $PYTHON benchmarks/cpu_vs_gpu.py --widths 1024 --batches 4096 --peer-shapes 1024x4096 \
    --peer-python "$PEER_PYTHON" --peer-timeout 75
for algo in td3 ppo; do
    steps=$TD3_STEPS
    [ "$algo" = ppo ] && steps=$PPO_STEPS
    for device in cpu cuda; do
        # compiling TD3's fused CUDA step took 131 s on the H100 host (Nov 27)
        step new "$TREE" 240 $PYTHON -m dispatchrl.cli train $algo --env pendulum --device $device \
            --steps "$steps" --json
    done
done

if [ -n "$BASELINE" ]; then
    step baseline "$BASELINE" 90 $PYTHON -m dispatchrl.cli demo --json
    for algo in td3 ppo; do
        steps=$BASELINE_TD3_STEPS
        [ "$algo" = ppo ] && steps=$BASELINE_PPO_STEPS
        step baseline "$BASELINE" 240 $PYTHON -m dispatchrl.cli train $algo --env pendulum --device cuda \
            --steps "$steps" --json
    done
fi

echo "== done in $(($(date +%s) - started)) s, exit $status"
rm -rf "$LOGS"
exit $status
