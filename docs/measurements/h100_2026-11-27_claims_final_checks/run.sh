#!/usr/bin/env bash
# test_gpu of .carry/nt (every test), then the real-shape check of .carry/rs against transformers.
set -u
mkdir -p /tmp/b && xz -dc .carry/nt/test_gpu.xz > /tmp/b/test_gpu && xz -dc .carry/rs/gpu_logits_dump.xz > /tmp/b/gpu_logits_dump && chmod +x /tmp/b/*
export MK_FIXTURES=$PWD/tests/fixtures
nvidia-smi -L | tee $OUT/gpu.txt
timeout 330 /tmp/b/test_gpu > $OUT/test_gpu.log 2>&1; echo "test_gpu rc=$?"
grep -E "^\[  (PASSED|FAILED) |FAILED|ms total\)$" $OUT/test_gpu.log | tail -6
PYTHONUNBUFFERED=1 timeout 240 python3 scripts/gpu_check_real_shapes.py /tmp/b $OUT/rs llama-3.2-1b qwen2.5-0.5b qwen3-1.7b pystdlib-6m llama-3.2-1b-12k > $OUT/real_shapes.log 2>&1
echo "real shapes rc=$?"; grep -v "Writing" $OUT/real_shapes.log | tail -12
find $OUT -type f -size +4M -delete
