#!/usr/bin/env bash
# Where 1B's step goes at depth 16384 on 7db3300's kernel: --trace 40 and --profile, with and without waits.
set -u
mkdir -p /tmp/b && xz -dc .carry/tr/mk-bench.xz > /tmp/b/mk-bench && chmod +x /tmp/b/*
B=/tmp/b/mk-bench
mkdir -p $OUT/tr
nvidia-smi -L > $OUT/tr/gpu.txt
timeout 60 $B --preset llama-3.2-1b --depths 16384 -n 64 -r 1 --trace 40 > $OUT/tr/trace_16384.txt 2>&1
timeout 60 $B --preset llama-3.2-1b --depths 16384 -n 64 -r 1 --profile > $OUT/tr/profile_16384.txt 2>&1
timeout 60 $B --preset llama-3.2-1b --depths 16384 -n 64 -r 1 --profile --no-waits > $OUT/tr/profile_16384_nowaits.txt 2>&1
grep -A12 'trace of step' $OUT/tr/trace_16384.txt | cut -c1-200
grep -h -A4 'per-instruction' $OUT/tr/profile_16384*.txt | cut -c1-300
tar czf $OUT/tr.tgz -C $OUT tr && rm -rf $OUT/tr
