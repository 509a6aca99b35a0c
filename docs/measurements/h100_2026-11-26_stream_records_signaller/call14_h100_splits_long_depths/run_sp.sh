#!/usr/bin/env bash
# Llama-3.2-1B at long depths on 7db3300's kernel: attention splits per kv head 16 (default: 132 / 8
# groups) against 8, 12, 24, 32; two rounds.
set -u
mkdir -p /tmp/b && xz -dc .carry/sp/mk-bench.xz > /tmp/b/mk-bench && chmod +x /tmp/b/*
B=/tmp/b/mk-bench
mkdir -p $OUT/sp
OUT=$OUT/sp CASES="llama-3.2-1b:4096,16384" ROUNDS=2 timeout 500 bench/ab.sh \
  "s16=$B|" "s8=$B|--splits 8" "s12=$B|--splits 12" "s24=$B|--splits 24" "s32=$B|--splits 32"
tar czf $OUT/all.tgz -C $OUT sp && rm -rf $OUT/sp
