#!/usr/bin/env bash
# What a step costs without its hand-offs, on 7db3300's kernel: the same mk-bench with and without
# --no-waits, two rounds.
set -u
mkdir -p /tmp/b && xz -dc .carry/nwf/mk-bench.xz > /tmp/b/mk-bench && chmod +x /tmp/b/*
B=/tmp/b/mk-bench
mkdir -p $OUT/nw
OUT=$OUT/nw CASES="llama-3.2-1b:128,1024,16384 qwen2.5-0.5b:1024 qwen3-1.7b:1024 llama-3.1-8b:1024" ROUNDS=2 timeout 500 bench/ab.sh \
  "waits=$B|" "nowaits=$B|--no-waits"
tar czf $OUT/all.tgz -C $OUT nw && rm -rf $OUT/nw
