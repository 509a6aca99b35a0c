#!/usr/bin/env bash
# test_gpu on the new build, then --trace 40 / --profile of 1B at 16384 on it.
set -u
mkdir -p /tmp/b && for f in .carry/new/*.xz; do xz -dc $f > /tmp/b/$(basename $f .xz); done && chmod +x /tmp/b/*
export MK_FIXTURES=$PWD/tests/fixtures
nvidia-smi -L > $OUT/gpu.txt
timeout 400 /tmp/b/test_gpu > $OUT/test_gpu.log 2>&1; echo "test_gpu rc=$?" | tee -a $OUT/gpu.txt
grep -E "^\[  (PASSED|FAILED) |FAILED" $OUT/test_gpu.log | head -20
timeout 60 /tmp/b/mk-bench --preset llama-3.2-1b --depths 16384 -n 64 -r 1 --trace 40 > $OUT/trace_16384.txt 2>&1
grep -A12 'trace of step' $OUT/trace_16384.txt | cut -c1-200
