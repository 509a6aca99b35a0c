#!/usr/bin/env bash
# The main job: install what is missing, build, and generate.
#  - always: the model shipped in models/pystdlib-6m (a small trained Llama) writes a Python function,
#    through mk-chat, on the GPU when there is one, else on the CPU emulator;
#  - with an NVIDIA GPU (nvidia-smi works and nvcc is installed): then the speed at a real shape, the
#    monokernel on Llama-3.2-1B's shapes with random weights (--preset llama-3.2-1b, its summary line) and
#    the benchmark line (mk-bench, context 1024).
# The showing part is scripts/demo.sh, which runs on a tree built elsewhere too (the GPU check does).
# Builds mk-run, mk-chat, mk-server and libmonokernel into build-none (no GPU) or build-nvidia.
# Extra arguments go to mk-run instead (e.g. -m MODEL_DIR -p "def fib(" -n 256).
#   scripts/run.sh [mk-run arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
gpu=none
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 && command -v nvcc >/dev/null; then gpu=nvidia; fi
if [[ $gpu == none && -x /usr/local/cuda/bin/nvcc ]] && nvidia-smi -L >/dev/null 2>&1; then export PATH=/usr/local/cuda/bin:$PATH; gpu=nvidia; fi
build=build-$gpu
cmake -S . -B "$build" -G Ninja -DMK_GPU=$gpu -DMK_BUILD_TESTS=OFF >/dev/null
# mk-chat, mk-server and the library too: they are what `cmake --install "$build"` installs (README).
targets=(mk-run mk-chat mk-server monokernel)
[[ $gpu != none ]] && targets+=(mk-bench)
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"
if [[ $# -gt 0 ]]; then
  exec "$build/host/tools/mk-run" "$@"
fi
exec scripts/demo.sh "$build"
