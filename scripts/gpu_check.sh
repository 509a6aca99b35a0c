#!/usr/bin/env bash
# GPU correctness checks, run on a machine with a GPU (e.g. through the device tool), from a build made
# with -DMK_GPU=nvidia (default build dir: build-nv). Writes logs under ${OUT:-out}/.
#   scripts/gpu_check.sh [BUILD_DIR]
set -uo pipefail
build=${1:-build-nv}
out=${OUT:-out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/gpu.txt"
export MK_FIXTURES="$(pwd)/tests/fixtures"
rc=0
"$build/tests/test_gpu" 2>&1 | tee "$out/test_gpu.log" || rc=1
"$build/tests/test_gpu_api" 2>&1 | tee "$out/test_gpu_api.log" || rc=1
# Several GPUs of one host: only where there are 2 or more (the binary fails on fewer, saying so).
gpus=$(nvidia-smi --list-gpus | wc -l)
if ((gpus >= 2)); then
  NCCL_NVLS_ENABLE=0 "$build/tests/test_gpu_multi" 2>&1 | tee "$out/test_gpu_multi.log" || rc=1
else
  echo "test_gpu_multi not run: it needs 2 or more GPUs, this machine has $gpus" | tee "$out/test_gpu_multi.log"
fi
exit $rc
