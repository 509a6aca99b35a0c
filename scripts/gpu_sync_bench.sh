#!/usr/bin/env bash
# Runs mk-bench-sync on the GPU machine and saves what it measured. Run on the GPU machine.
#   scripts/gpu_sync_bench.sh [BINARY_OR_BUILD_DIR] [OUT_DIR]
# BINARY_OR_BUILD_DIR: the mk-bench-sync binary, or a build dir holding bench/mk-bench-sync; default
#   build-sync-nv (NVIDIA) or build-sync-amd (AMD). If the binary is missing, that build dir is configured
#   and built here (target mk-bench-sync only, tests off; needs the Debian dev packages, which the GPU
#   machine may lack: build here and carry the binary instead, e.g. carry build-sync-nv/bench/mk-bench-sync).
# OUT_DIR: default $OUT when set (the device tool's result folder), else out/sync.
# Environment: MK_SYNC_ITERS (default 10000), MK_SYNC_REPS (default 7), MK_SYNC_EXTRA (more flags for
#   every run).
# Writes (at most 7 files): device.txt, sync.txt (table, probe grouping), sync.json (same run as JSON:
#   the numbers to record), sync_merge8.json (probed fragments below 8 SMs merged), sync_sleep64.json
#   (64 ns pause between polls), sync_synthetic.json (block-index grouping, 8 groups), run.log.
# Exit status: 0 when every run succeeded with no violations; 1 when a run failed; 3 when a run reported
# violations or a hung barrier (its output is kept).
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  gpu=nvidia; default_build="build-sync-nv"
elif command -v rocminfo >/dev/null 2>&1 && rocminfo >/dev/null 2>&1; then
  gpu=amd; default_build="build-sync-amd"
else
  echo "gpu_sync_bench.sh: no GPU found (neither nvidia-smi -L nor rocminfo works)" >&2
  exit 1
fi
target="${1:-$default_build}"
out="${2:-${OUT:-$repo/out/sync}}"
mkdir -p "$out"
if [ -f "$target" ]; then
  tool="$target"
  if [ ! -x "$tool" ]; then  # a carried binary may arrive without its execute bit
    tool="$(mktemp /tmp/mk-bench-sync.XXXXXX)" && cp "$target" "$tool" && chmod +x "$tool"
  fi
else
  tool="$target/bench/mk-bench-sync"
  if [ ! -x "$tool" ]; then
    echo "gpu_sync_bench.sh: building $tool (MK_GPU=$gpu)"
    generator=()
    command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
    cmake -S "$repo" -B "$target" "${generator[@]}" -DMK_GPU="$gpu" -DMK_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=Release \
      || { echo "gpu_sync_bench.sh: configure failed" >&2; exit 1; }
    cmake --build "$target" --target mk-bench-sync -j "$(nproc)" || { echo "gpu_sync_bench.sh: build failed" >&2; exit 1; }
  fi
fi
[ -x "$tool" ] || { echo "gpu_sync_bench.sh: $tool is not an executable" >&2; exit 1; }

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(hostname)"
  echo "commit: $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "binary: $tool"
  if [ "$gpu" = nvidia ]; then
    nvidia-smi -L
    nvidia-smi --query-gpu=name,driver_version,compute_cap,clocks.sm,clocks.max.sm,mig.mode.current --format=csv 2>/dev/null || true
  else
    rocminfo 2>/dev/null | grep -E "Marketing Name|Name: +gfx|Compute Unit" || true
  fi
} >"$out/device.txt" 2>&1

iters="${MK_SYNC_ITERS:-10000}"
reps="${MK_SYNC_REPS:-7}"
# shellcheck disable=SC2206
extra=(${MK_SYNC_EXTRA:-})
common=(-n "$iters" -r "$reps" "${extra[@]}")
worst=0
run() {  # run <output file> <flags...>
  local file="$1"; shift
  echo "== mk-bench-sync $* ${common[*]}" | tee -a "$out/run.log"
  "$tool" "$@" "${common[@]}" >"$out/$file" 2>>"$out/run.log"
  local rc=$?
  echo "   exit status $rc -> $file" | tee -a "$out/run.log"
  if [ "$rc" -eq 1 ] || [ "$rc" -eq 2 ]; then worst=1; tail -5 "$out/run.log" >&2
  elif [ "$rc" -eq 3 ] && [ "$worst" -eq 0 ]; then worst=3; fi
}
run sync.txt
cat "$out/sync.txt"
run sync.json --json
run sync_merge8.json --json --merge-below 8
run sync_sleep64.json --json --sleep-ns 64
run sync_synthetic.json --json --domains synthetic --groups 8
echo "gpu_sync_bench.sh: results in $out (exit status $worst)"
exit "$worst"
