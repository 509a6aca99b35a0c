#!/usr/bin/env bash
# Consumers' place in the stream advanced row by row (rp) against sg, same call, three rounds, and the
# no-waits bound of both.
set -u
mkdir -p /tmp/b && xz -dc .carry/rs3/mk-bench-rp.xz > /tmp/b/mk-bench-rp && xz -dc .carry/rs3/mk-bench-sg.xz > /tmp/b/mk-bench-sg && chmod +x /tmp/b/*
mkdir -p $OUT/ab $OUT/nw
OUT=$OUT/ab CASES="llama-3.2-1b:128,1024 qwen2.5-0.5b:1024 qwen3-1.7b:1024 llama-3.1-8b:1024" ROUNDS=3 timeout 400 bench/ab.sh \
  "sg=/tmp/b/mk-bench-sg|" "rp=/tmp/b/mk-bench-rp|"
OUT=$OUT/nw CASES="llama-3.2-1b:1024 qwen2.5-0.5b:1024" ROUNDS=2 timeout 150 bench/ab.sh \
  "sg_nw=/tmp/b/mk-bench-sg|--no-waits" "rp_nw=/tmp/b/mk-bench-rp|--no-waits"
tar czf $OUT/all.tgz -C $OUT ab nw && rm -rf $OUT/ab $OUT/nw
