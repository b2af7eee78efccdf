#!/usr/bin/env bash
# The checks that need a real NVIDIA GPU (issue #13). CI has none and runs CUDA in numba's
# simulator; run this on a GPU machine and keep its output with the measurements:
#     bash benchmarks/gpu_check.sh 2>&1 | tee gpu_check.log
# Nothing here has run on hardware yet for the single-block fused step (built in the simulator).
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
export NUMBA_ENABLE_CUDASIM=0
status=0

echo "== versions and device"
$PYTHON - <<'PY' || status=1
import numba, numpy
from numba import cuda
print("numba", numba.__version__, "numpy", numpy.__version__)
print("device", cuda.get_current_device().name)
PY

echo "== fused CUDA step tests on hardware (one launch per step(n), equal to CPU)"
$PYTHON -m pytest tests/test_cuda_fused.py -q -p no:cacheprovider || status=1

echo "== every CUDA test on hardware"
$PYTHON -m pytest tests -q -p no:cacheprovider -k cuda || status=1

echo "== the demo on every device (CUDA: one single-block kernel per step(n))"
$PYTHON -m dispatchrl.cli demo --json || status=1

echo "== the demo step with other block sizes, then dense layers: CPU vs CUDA"
for block in 128 512; do
    $PYTHON benchmarks/cpu_vs_gpu.py --block "$block" --widths 64 --batches 100 || status=1
done
$PYTHON benchmarks/cpu_vs_gpu.py || status=1

echo "== TD3 Pendulum on CUDA (fused single block) and CPU, 10k steps"
for device in cpu cuda; do
    /usr/bin/time -f "$device: %e s" $PYTHON -m dispatchrl.cli train td3 --env pendulum --device "$device" --steps 10000 --json \
        | tail -n 1 || status=1
done

exit $status
