#!/usr/bin/env bash
# test_gpu of .carry/new.
set -u
mkdir -p /tmp/b && xz -dc .carry/nt/test_gpu.xz > /tmp/b/test_gpu && chmod +x /tmp/b/test_gpu
export MK_FIXTURES=$PWD/tests/fixtures
nvidia-smi -L > $OUT/gpu.txt
timeout 400 /tmp/b/test_gpu ${FILTER:-} > $OUT/test_gpu.log 2>&1; echo "test_gpu rc=$?" | tee -a $OUT/gpu.txt
grep -E "^\[  (PASSED|FAILED) |FAILED" $OUT/test_gpu.log | head -20
