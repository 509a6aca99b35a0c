#!/usr/bin/env bash
# Call 2: main's build (old) against the new build with --inputs-first per op set.
set -u
mkdir -p /tmp/b && for f in .carry/if2/*.xz; do xz -dc "$f" > /tmp/b/$(basename "$f" .xz); done; chmod +x /tmp/b/*
O=$OUT/res; mkdir -p $O
OUT=$O CASES="${CASES:-llama-3.2-1b:128,1024,4096 qwen2.5-0.5b:1024}" ROUNDS=${ROUNDS:-2} timeout 500 bench/ab.sh \
  'old=/tmp/b/mk-bench-old|' 'none=/tmp/b/mk-bench|--inputs-first none' 'all=/tmp/b/mk-bench|--inputs-first all' \
  'o_proj=/tmp/b/mk-bench|--inputs-first o_proj' 'qkv_o=/tmp/b/mk-bench|--inputs-first qkv,o_proj' 'o_down=/tmp/b/mk-bench|--inputs-first o_proj,down'
tar czf $OUT/all.tgz -C $OUT res && rm -rf $O
