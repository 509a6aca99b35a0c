#!/usr/bin/env bash
# Narrow stages with the cheaper issue (7db3300's kernel): the plan's default against qkv narrowed too
# and other widths, two rounds.
set -u
mkdir -p /tmp/b && xz -dc .carry/nr/mk-bench.xz > /tmp/b/mk-bench && chmod +x /tmp/b/*
B=/tmp/b/mk-bench
mkdir -p $OUT/nr
OUT=$OUT/nr CASES="llama-3.2-1b:128,1024 qwen3-1.7b:1024 llama-3.1-8b:1024" ROUNDS=2 timeout 500 bench/ab.sh \
  "base=$B|" "qkv_o66=$B|--narrow 66 --narrow-ops qkv,o_proj" "o88=$B|--narrow 88 --narrow-ops o_proj" "o44=$B|--narrow 44 --narrow-ops o_proj" "none=$B|--narrow 0"
tar czf $OUT/all.tgz -C $OUT nr && rm -rf $OUT/nr
