#!/usr/bin/env bash
# test_gpu on the build whose Embed loads its row in one round trip.
set -u
mkdir -p /tmp/b && xz -dc .carry/em/test_gpu.xz > /tmp/b/test_gpu && chmod +x /tmp/b/*
export MK_FIXTURES=$PWD/tests/fixtures
nvidia-smi -L > $OUT/gpu.txt
timeout 400 /tmp/b/test_gpu > $OUT/test_gpu.log 2>&1; echo "test_gpu rc=$?" | tee -a $OUT/gpu.txt
grep -E "^\[  (PASSED|FAILED) |FAILED" $OUT/test_gpu.log | head
