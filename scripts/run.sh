#!/usr/bin/env bash
# The main job: install what is missing, build, and generate.
#  - with an NVIDIA GPU (nvidia-smi works and nvcc is installed): the monokernel on Llama-3.2-1B's shapes
#    with random weights (--preset llama-3.2-1b), then the benchmark line (mk-bench, context 1024);
#  - otherwise: the CPU emulator generating from a small built-in synthetic model.
# Extra arguments go to mk-run (e.g. -m MODEL_DIR -n 256).
#   scripts/run.sh [mk-run arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
gpu=none
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 && command -v nvcc >/dev/null; then gpu=nvidia; fi
if [[ $gpu == none && -x /usr/local/cuda/bin/nvcc ]] && nvidia-smi -L >/dev/null 2>&1; then export PATH=/usr/local/cuda/bin:$PATH; gpu=nvidia; fi
build=build-$gpu
cmake -S . -B "$build" -G Ninja -DMK_GPU=$gpu -DMK_BUILD_TESTS=OFF >/dev/null
# mk-chat and the library too: they are what `cmake --install "$build"` installs (README).
targets=(mk-run mk-chat monokernel)
[[ $gpu != none ]] && targets+=(mk-bench)
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"
if [[ $gpu != none && $# -eq 0 ]]; then
  "$build/host/tools/mk-run" --preset llama-3.2-1b -n 128 -c 2048
  "$build/bench/mk-bench" --preset llama-3.2-1b --depths 1024 -n 128 -r 3
else
  "$build/host/tools/mk-run" "$@"
fi
