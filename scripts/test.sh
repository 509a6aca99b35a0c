#!/usr/bin/env bash
# Every test that runs without a GPU, plus the compile checks of all GPU code (what CI runs: .ci/run).
#  1. installs what is missing (Debian 12 packages; node packages for the tokenizer reference at test time)
#  2. compiles all device code for NVIDIA (nvcc, sm_90a) and AMD (hipcc, gfx942 or gfx940+gfx90a),
#     warnings as errors, including the GPU test binary and the GPU tools (they run on a GPU machine:
#     scripts/gpu_check.sh)
#  3. builds the CPU targets and runs ctest: unit tests, reference vs emulator vs transformers fixtures,
#     the dependency checker, the tokenizer against its outside reference, and the fuzzers of the model
#     file parsers (safetensors, config, tokenizer, chat template) for a bounded time.
#   scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
scripts/install_deps.sh --amd
[[ -x /usr/local/cuda/bin/nvcc ]] && export PATH=/usr/local/cuda/bin:$PATH
command -v nvcc >/dev/null || { echo "test.sh: nvcc (CUDA 12.4+) is required to compile the NVIDIA device code" >&2; exit 1; }

# The AMD and CPU configurations compile the host sources with identical flags: ccache shares them.
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
gpu_targets=(mk_device mk_topology_probe mk_sync test_gpu test_gpu_api gpu_logits_dump mk-bench mk-bench-sync mk-run mk-topo mk-chat monokernel)
for gpu in amd nvidia; do
  echo "== compile check: MK_GPU=$gpu (warnings are errors)"
  cmake -S . -B "build-ci-$gpu" -G Ninja -DMK_GPU=$gpu -DMK_WERROR=ON "${launcher[@]}" >/dev/null
  cmake --build "build-ci-$gpu" -j"$jobs" --target "${gpu_targets[@]}"
done

echo "== CPU build and tests"
cmake -S . -B build-ci-cpu -G Ninja -DMK_GPU=none -DMK_WERROR=ON "${launcher[@]}" >/dev/null
cmake --build build-ci-cpu -j"$jobs"
ctest --test-dir build-ci-cpu --output-on-failure -j"$jobs" --timeout 900
