#!/usr/bin/env bash
# 9a37b8c's build (old) against the build with one rows-per-chunk helper (new); then test_gpu on new.
set -u
mkdir -p /tmp/b && for f in .carry/mend/*.xz; do xz -dc "$f" > /tmp/b/$(basename "$f" .xz); done; chmod +x /tmp/b/*
O=$OUT/res; mkdir -p $O
OUT=$O CASES="llama-3.2-1b:128,1024 qwen2.5-0.5b:1024" ROUNDS=2 timeout 420 bench/ab.sh \
  'old=/tmp/b/mk-bench-old|' 'new=/tmp/b/mk-bench|'
tar czf $OUT/all.tgz -C $OUT res && rm -rf $O
