#!/usr/bin/env bash
# Phase probe (measurement-only build): attention's tile-path phases and o_proj's combine, clock64 cycles,
# at step 40 of 8B and 1B at depth 1024.
set -u
mkdir -p /tmp/b/p && xz -dc .carry/probe/mk-bench.xz > /tmp/b/p/mk-bench && chmod +x /tmp/b/p/mk-bench
nvidia-smi -L > $OUT/gpu.txt
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm --format=csv >> $OUT/gpu.txt
for p in llama-3.1-8b llama-3.2-1b; do
  timeout 120 /tmp/b/p/mk-bench --preset $p --depths 1024 -n 64 -r 1 --trace 40 > $OUT/probe_$p.txt 2>&1
  echo "== $p $(grep -c '^PH A' $OUT/probe_$p.txt) attention lines, $(grep -c '^PH O' $OUT/probe_$p.txt) o_proj lines"
done
cd $OUT && tar czf probe.tgz probe_* && rm -f probe_*
