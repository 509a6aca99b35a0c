#!/usr/bin/env bash
# A/B of two mk-bench builds on one machine, in one call: `stash` unpacks the old build (.carry/a) to a
# path the machine keeps between calls; `ab` unpacks the new one (.carry/b) and runs both, alternating.
set -u
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
mkdir -p .carry/keep/lib
for f in .carry/icu/*.xz; do [[ -e $f ]] && xz -dc "$f" > ".carry/keep/lib/$(basename "$f" .xz)"; done
export LD_LIBRARY_PATH=$PWD/.carry/keep/lib
if [[ $1 == stash ]]; then
  mkdir -p .carry/keep && xz -dc .carry/a/mk-bench.xz > .carry/keep/mk-bench-old && chmod +x .carry/keep/mk-bench-old && ls -la .carry/keep
  exit
fi
[[ -x .carry/keep/mk-bench-old ]] || { echo "the old build is gone: a fresh machine"; exit 3; }
xz -dc .carry/b/mk-bench.xz > .carry/keep/mk-bench-new && chmod +x .carry/keep/mk-bench-new
mkdir -p "$OUT/r"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/r/gpu.txt" 2>&1
for round in 1 2; do
  for cfg in "qwen2.5-0.5b none" "llama-3.2-1b none" "gemma-3-1b none" "llama-3.1-8b none" "llama-3.1-8b int4" "llama-3.1-8b fp8"; do
    set -- $cfg
    for bin in old new; do
      [[ $round == 2 ]] && { [[ $bin == old ]] && bin=new || bin=old; }
      timeout 100 .carry/keep/mk-bench-$bin --preset "$1" --quantize "$2" --depths 1024 -n 128 -r 3 --json \
        > "$OUT/r/${1}_${2}_${bin}_r$round.json" 2> "$OUT/r/${1}_${2}_${bin}_r$round.err" || echo "FAILED $1 $2 $bin $round"
      python3 -c "import json,sys; d=json.load(open(sys.argv[1])); x=d['depths'][0]; print(sys.argv[1].split('/')[-1], round(x['median_ms'],4), round(x['pct_read_ceiling'],1))" "$OUT/r/${1}_${2}_${bin}_r$round.json" 2>/dev/null
    done
  done
done
tar czf "$OUT/results.tgz" -C "$OUT" r && rm -rf "$OUT/r"
