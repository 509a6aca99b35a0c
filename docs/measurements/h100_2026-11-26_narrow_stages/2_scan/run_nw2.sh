#!/usr/bin/env bash
# Narrow row stages, a wider scan: Qwen2.5-0.5B, Llama-3.2-1B and Llama-3.1-8B, one binary, each group of
# variants against the default schedule in its own interleaved rounds.
set -u
mkdir -p /tmp/b && xz -dc .carry/nw/mk-bench.xz > /tmp/b/mk-bench && chmod +x /tmp/b/mk-bench
B=/tmp/b/mk-bench
n() { echo "$1=$B|--narrow $2 --narrow-ops $3"; }
mkdir -p $OUT/qwen $OUT/1b $OUT/8b
OUT=$OUT/qwen CASES="qwen2.5-0.5b:128,1024" ROUNDS=2 timeout 200 bench/ab.sh "base=$B|" \
  "$(n qod50 50 qkv,o_proj,down)" "$(n qod66 66 qkv,o_proj,down)" "$(n qod88 88 qkv,o_proj,down)" \
  "$(n qod100 100 qkv,o_proj,down)" "$(n qodg66 66 qkv,o_proj,down,gate_up)" "$(n qo66 66 qkv,o_proj)"
OUT=$OUT/1b CASES="llama-3.2-1b:128,1024" ROUNDS=2 timeout 220 bench/ab.sh "base=$B|" \
  "$(n qo66 66 qkv,o_proj)" "$(n qo88 88 qkv,o_proj)" "$(n qo100 100 qkv,o_proj)" "$(n o66 66 o_proj)" \
  "$(n o100 100 o_proj)" "$(n q100 100 qkv)"
OUT=$OUT/8b CASES="llama-3.1-8b:1024" ROUNDS=1 timeout 120 bench/ab.sh "base=$B|" \
  "$(n qo66 66 qkv,o_proj)" "$(n o66 66 o_proj)" "$(n qo100 100 qkv,o_proj)"
tar czf $OUT/all.tgz -C $OUT qwen 1b 8b && rm -rf $OUT/qwen $OUT/1b $OUT/8b
