#!/usr/bin/env bash
# The real-shape check against transformers on the new build, every case.
set -u
mkdir -p /tmp/b && xz -dc .carry/rs/gpu_logits_dump.xz > /tmp/b/gpu_logits_dump && chmod +x /tmp/b/*
nvidia-smi -L | tee $OUT/gpu.txt
PYTHONUNBUFFERED=1 timeout 560 python3 scripts/gpu_check_real_shapes.py /tmp/b $OUT/rs llama-3.2-1b qwen2.5-0.5b qwen3-1.7b pystdlib-6m llama-3.2-1b-12k > $OUT/real_shapes.log 2>&1
echo "real shapes rc=$?"; grep -v "Writing" $OUT/real_shapes.log | tail -25
find $OUT -type f -size +4M -delete; du -sh $OUT
