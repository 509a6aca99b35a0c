#!/usr/bin/env bash
# Probes the GPU's topology with `mk-topo` and saves what it found. Run on the GPU machine.
#   scripts/gpu_topology_check.sh [BUILD_DIR] [OUT_DIR]
# BUILD_DIR: a build whose host/tools/mk-topo is used; default build-topo-nv (NVIDIA) or build-topo-amd
#   (AMD), configured and built here (target mk-topo only, tests off) when the binary is missing.
# OUT_DIR: default $OUT when set (the device tool's result folder), else out/topology.
# Writes: topology.json (probe 1), topology_run2.json (probe 2), topology.txt (table), probe1.log and
# probe2.log (progress, warnings), device.txt (what the driver says about the GPU).
# Exit status: 0 when both probes succeeded and found the same map; 1 when a probe or the build failed;
# 3 when the two probes disagree (both files are kept).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  gpu=nvidia; default_build="build-topo-nv"
elif command -v rocminfo >/dev/null 2>&1 && rocminfo >/dev/null 2>&1; then
  gpu=amd; default_build="build-topo-amd"
else
  echo "gpu_topology_check.sh: no GPU found (neither nvidia-smi -L nor rocminfo works)" >&2
  exit 1
fi
build="${1:-$default_build}"
out="${2:-${OUT:-$repo/out/topology}}"
mkdir -p "$out"
tool="$build/host/tools/mk-topo"

if [ ! -x "$tool" ]; then
  echo "gpu_topology_check.sh: building $tool (MK_GPU=$gpu)"
  generator=()
  command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
  cmake -S "$repo" -B "$build" "${generator[@]}" -DMK_GPU="$gpu" -DMK_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=Release
  cmake --build "$build" --target mk-topo -j "$(nproc)"
fi

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(hostname)"
  echo "commit: $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  if [ "$gpu" = nvidia ]; then
    nvidia-smi -L
    nvidia-smi --query-gpu=name,driver_version,compute_cap,mig.mode.current --format=csv 2>/dev/null || true
  else
    rocminfo 2>/dev/null | grep -E "Marketing Name|Name: +gfx|Compute Unit" || true
  fi
} >"$out/device.txt" 2>&1

probe() {  # probe <json file> <log file>
  if ! "$tool" --json --no-fallback --verbose >"$1" 2>"$2"; then
    echo "gpu_topology_check.sh: mk-topo failed; its log ($2):" >&2
    cat "$2" >&2
    exit 1
  fi
}
probe "$out/topology.json" "$out/probe1.log"
probe "$out/topology_run2.json" "$out/probe2.log"
"$tool" --from "$out/topology.json" >"$out/topology.txt"
cat "$out/topology.txt"

# mk-topo prints each of these arrays on one line, so the maps compare line by line.
same=1
for key in unit_domain domain_die unit_hw_id; do
  if [ "$(grep "\"$key\"" "$out/topology.json")" != "$(grep "\"$key\"" "$out/topology_run2.json")" ]; then
    echo "gpu_topology_check.sh: WARNING: '$key' differs between the two probes" >&2
    same=0
  fi
done
echo "gpu_topology_check.sh: results in $out"
[ "$same" -eq 1 ] || exit 3
