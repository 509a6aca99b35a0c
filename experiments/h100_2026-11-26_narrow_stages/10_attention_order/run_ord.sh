#!/usr/bin/env bash
# Attention items split-major with the last splits first (new) against 96d6a44's order (base): two
# binaries whose kernels are the same code (the change is in the host's schedule), three rounds.
set -u
mkdir -p /tmp/b && for f in .carry/ord/*.xz; do xz -dc "$f" > /tmp/b/$(basename "$f" .xz); done; chmod +x /tmp/b/*
mkdir -p $OUT/ord
OUT=$OUT/ord CASES="qwen2.5-0.5b:1024 llama-3.2-1b:128,1024,16384 qwen3-1.7b:1024 llama-3.1-8b:1024" ROUNDS=3 timeout 420 bench/ab.sh \
  "base=/tmp/b/mk-bench-base|" "order=/tmp/b/mk-bench|"
timeout 60 /tmp/b/mk-bench --preset llama-3.2-1b --depths 1024 -n 64 -r 1 --trace 40 > $OUT/ord/trace_1b_order.txt 2>&1
timeout 60 /tmp/b/mk-bench-base --preset llama-3.2-1b --depths 1024 -n 64 -r 1 --trace 40 > $OUT/ord/trace_1b_base.txt 2>&1
tar czf $OUT/all.tgz -C $OUT ord && rm -rf $OUT/ord
