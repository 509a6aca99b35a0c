#!/usr/bin/env bash
# Every test that runs without a GPU, plus the compile checks of all GPU code (what CI runs: .ci/run).
#  1. installs what is missing (Debian 12 packages; node packages for the tokenizer reference and the
#     mk-server clients at test time)
#  2. compiles all device code for AMD (hipcc, gfx942 or gfx940+gfx90a) and NVIDIA (nvcc 12.4+, sm_90a),
#     warnings as errors, including the GPU test binary and the GPU tools (they run on a GPU machine:
#     scripts/gpu_check.sh); without a GPU, checks that mk-bench says there is none
#  3. builds the CPU targets and runs ctest: unit tests, reference vs emulator vs transformers fixtures,
#     the dependency checker, the tokenizer against its outside reference, the tools' messages, mk-server
#     over HTTP (the openai client, malformed requests, load, response_format), structured output's
#     validity (the shipped model's replies to 1,006 JSON schemas, checked by ajv), and the fuzzers of the
#     model file parsers (safetensors, config, tokenizer, chat template) for a bounded time.
# A compile check whose toolchain cannot be installed here is skipped, loudly, and named in the last line;
# every check that can run must pass. The NVIDIA check needs CUDA 12.4+, which Debian does not package
# (Debian 12's nvidia-cuda-toolkit is CUDA 11.8: too old for sm_90a code), so on a fresh Debian 12 it is
# skipped; install NVIDIA's CUDA (nvcc in PATH or /usr/local/cuda) to run it.
#   scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
start=$SECONDS
# "== [m:ss] what": each phase with the time since the start, so a slow phase shows in any log.
phase() { printf '== [%d:%02d] %s\n' $(((SECONDS - start) / 60)) $(((SECONDS - start) % 60)) "$*"; }
phase "packages"
scripts/install_deps.sh --amd
skipped=()  # "name (why)" of each compile check that could not run here

skip() {
  skipped+=("$1 ($2)")
  {
    echo "################################################################################"
    echo "## SKIPPED: $1"
    echo "##   $2"
    echo "################################################################################"
  } >&2
}

# nvcc (in PATH, NVIDIA's default location added) if it is 12.4 or newer; else why not, on stdout.
[[ -x /usr/local/cuda/bin/nvcc ]] && export PATH=/usr/local/cuda/bin:$PATH
check_nvcc() {
  if ! command -v nvcc >/dev/null; then
    echo "no nvcc in PATH or /usr/local/cuda/bin; Debian packages no CUDA 12.4+"
    return 1
  fi
  local version
  version=$(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p')
  if [[ -z $version ]] || ! printf '12.4\n%s\n' "$version" | sort -V -C; then
    echo "$(command -v nvcc) is CUDA ${version:-of an unknown version}; the sm_90a device code needs CUDA 12.4+"
    return 1
  fi
}

# The AMD and CPU configurations compile the host sources with identical flags: ccache shares them.
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
gpu_targets=(mk_device mk_topology_probe mk_sync test_gpu test_gpu_multi test_gpu_api gpu_logits_dump mk-bench mk-bench-sync mk-run mk-topo mk-chat mk-server monokernel)
compile_check() {
  phase "compile check: MK_GPU=$1 (warnings are errors)"
  cmake -S . -B "build-ci-$1" -G Ninja -DMK_GPU="$1" -DMK_WERROR=ON "${launcher[@]}" >/dev/null
  cmake --build "build-ci-$1" -j"$jobs" --target "${gpu_targets[@]}"
}

compile_check amd

if why=$(check_nvcc); then
  compile_check nvidia
  # Without an NVIDIA driver, mk-bench must say that there is no GPU (the CUDA runtime's own words are
  # "CUDA driver version is insufficient").
  if ! /sbin/ldconfig -p 2>/dev/null | grep 'libcuda\.so\.1 ' >/dev/null && ! command -v nvidia-smi >/dev/null; then
    phase "check: mk-bench without an NVIDIA driver says there is no GPU"
    if out=$(build-ci-nvidia/bench/mk-bench 2>&1); then
      echo "test.sh: mk-bench succeeded without an NVIDIA driver" >&2
      exit 1
    fi
    expected="mk-bench needs a GPU; none is usable here: there is no NVIDIA driver on this machine"
    if [[ $out != *"$expected"* ]]; then
      printf 'test.sh: mk-bench without a driver should say "%s"; it said:\n%s\n' "$expected" "$out" >&2
      exit 1
    fi
  fi
else
  skip "compile check MK_GPU=nvidia" "$why"
fi

phase "CPU build"
cmake -S . -B build-ci-cpu -G Ninja -DMK_GPU=none -DMK_WERROR=ON "${launcher[@]}" >/dev/null
cmake --build build-ci-cpu -j"$jobs"
phase "tests (ctest)"
ctest --test-dir build-ci-cpu --output-on-failure -j"$jobs" --timeout 900
phase "done"

if ((${#skipped[@]} == 0)); then
  echo "test.sh: PASSED: every check ran and passed"
else
  echo "test.sh: PASSED the checks that can run here; SKIPPED ${#skipped[@]}: $(IFS=';'; echo "${skipped[*]}")"
fi
