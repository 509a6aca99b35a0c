#!/usr/bin/env bash
# Throwaway probe build (clock64 around the weight stream's chunk issue on thread 0, printed by workgroups
# 0, 1 and 70 at the end of each launch): Qwen2.5-0.5B and Llama-3.2-1B at depth 1024, with and without
# --no-waits, one repetition of 16 tokens.
set -u
mkdir -p /tmp/b && xz -dc .carry/pr/mk-bench.xz > /tmp/b/mk-bench && chmod +x /tmp/b/*
nvidia-smi -L > $OUT/gpu.txt; nvidia-smi -q -d CLOCK | grep -A4 'Max Clocks' >> $OUT/gpu.txt
for p in qwen2.5-0.5b llama-3.2-1b; do
  for f in "" "--no-waits"; do
    timeout 60 /tmp/b/mk-bench --preset $p --depths 1024 -n 16 -r 1 $f > $OUT/probe_${p}${f:+_nowaits}.txt 2>&1
  done
done
grep -H PROBE $OUT/*.txt | tail -24
