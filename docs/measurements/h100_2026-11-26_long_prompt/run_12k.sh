#!/usr/bin/env bash
set -u
mkdir -p /tmp/b && for f in gpu_logits_dump test_gpu; do xz -dc .carry/lg/$f.xz > /tmp/b/$f; done && chmod +x /tmp/b/*
nvidia-smi -L | tee $OUT/gpu.txt
PYTHONUNBUFFERED=1 timeout 330 python3 scripts/gpu_check_real_shapes.py /tmp/b $OUT/rs llama-3.2-1b-12k > $OUT/real_shapes_12k.log 2>&1
echo "real shapes rc=$?"; grep -v "Writing\|position" $OUT/real_shapes_12k.log | tail -5
MK_FIXTURES=$PWD/tests/fixtures timeout 240 /tmp/b/test_gpu > $OUT/test_gpu.log 2>&1; echo "test_gpu rc=$?"
grep -E "^\[  (PASSED|FAILED) " $OUT/test_gpu.log
