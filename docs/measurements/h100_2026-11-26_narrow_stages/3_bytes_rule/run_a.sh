#!/usr/bin/env bash
# Narrow stages planned by the engine (default) against none (--narrow 0), one binary: test_gpu first,
# then the A/B over the bf16 presets, three interleaved rounds.
set -u
mkdir -p /tmp/b && for f in .carry/nw/*.xz; do xz -dc "$f" > /tmp/b/$(basename "$f" .xz); done; chmod +x /tmp/b/*
B=/tmp/b/mk-bench
O=$OUT/res; mkdir -p $O
OUT=$O TEST_GPU=/tmp/b/test_gpu TEST_COUNT=35 CASES="qwen2.5-0.5b:128,1024 llama-3.2-1b:128,1024,16384 qwen3-1.7b:1024 llama-3.2-3b:1024 llama-3.1-8b:1024" \
  ROUNDS=3 timeout 520 bench/ab.sh "none=$B|--narrow 0" "planned=$B|"
tar czf $OUT/all.tgz -C $OUT res && rm -rf $O
