#!/usr/bin/env bash
set -u
mkdir -p /tmp/b && xz -dc .carry/fl/mk-bench.xz > /tmp/b/mk-bench && chmod +x /tmp/b/*
O=$OUT/res; mkdir -p $O
OUT=$O CASES="llama-3.2-1b:128,1024 qwen2.5-0.5b:1024 llama-3.1-8b:1024" ROUNDS=3 timeout 420 bench/ab.sh \
  'look0=/tmp/b/mk-bench|' 'look1=/tmp/b/mk-bench|--first-look'
/tmp/b/mk-bench --preset llama-3.2-1b --depths 1024 -n 64 --first-look --trace 40 > $O/trace_look1.txt 2>&1
/tmp/b/mk-bench --preset llama-3.2-1b --depths 1024 -n 64 --trace 40 > $O/trace_look0.txt 2>&1
tar czf $OUT/all.tgz -C $OUT res && rm -rf $O
