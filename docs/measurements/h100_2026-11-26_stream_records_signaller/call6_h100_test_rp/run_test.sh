#!/usr/bin/env bash
# Consumers' place in the stream advanced row by row, no division (rp): test_gpu, then rp against sg (the
# records-based producer with the signal from warp 1) in the same call, three rounds.
set -u
mkdir -p /tmp/b && xz -dc .carry/rp/test_gpu.xz > /tmp/b/test_gpu && xz -dc .carry/rp/mk-bench.xz > /tmp/b/mk-bench-rp && chmod +x /tmp/b/*
export MK_FIXTURES=$PWD/tests/fixtures
nvidia-smi -L > $OUT/gpu.txt
timeout 400 /tmp/b/test_gpu > $OUT/test_gpu.log 2>&1; echo "test_gpu rc=$?" | tee -a $OUT/gpu.txt
grep -E "^\[  (PASSED|FAILED) |FAILED" $OUT/test_gpu.log | head
grep -q "PASSED  \] 35 tests" $OUT/test_gpu.log || exit 1
