#!/usr/bin/env bash
# The no-waits bound at longer depths (Llama-3.2-1B 4096 and 16384) and for quantized weights (1B and
# 8B, fp8 and int4, depth 1024): the same mk-bench (4043beb + --no-waits) with and without, two rounds.
set -u
mkdir -p /tmp/b && xz -dc .carry/nw2/mk-bench.xz > /tmp/b/mk-bench && chmod +x /tmp/b/*
B=/tmp/b/mk-bench
mkdir -p $OUT/deep $OUT/quant
OUT=$OUT/deep CASES="llama-3.2-1b:4096,16384" ROUNDS=2 timeout 200 bench/ab.sh "waits=$B|" "nowaits=$B|--no-waits"
OUT=$OUT/quant CASES="llama-3.2-1b:1024 llama-3.1-8b:1024" ROUNDS=2 timeout 300 bench/ab.sh \
  "fp8=$B|--quantize fp8" "fp8_nowaits=$B|--quantize fp8 --no-waits" "int4=$B|--quantize int4" "int4_nowaits=$B|--quantize int4 --no-waits"
tar czf $OUT/all.tgz -C $OUT deep quant && rm -rf $OUT/deep $OUT/quant
