#!/usr/bin/env bash
# The planned narrow stages (16-bit-count rule) against none, one binary: test_gpu, then every preset in
# bf16, and Llama-3.2-1B, Qwen2.5-0.5B and Llama-3.1-8B in fp8 and int4; three interleaved rounds (two for
# the quantized ones).
set -u
mkdir -p /tmp/b && for f in .carry/fin/*.xz; do xz -dc "$f" > /tmp/b/$(basename "$f" .xz); done; chmod +x /tmp/b/*
B=/tmp/b/mk-bench
mkdir -p $OUT/bf16 $OUT/fp8 $OUT/int4
OUT=$OUT/bf16 TEST_GPU=/tmp/b/test_gpu TEST_COUNT=35 CASES="qwen2.5-0.5b:128,1024 llama-3.2-1b:128,1024,16384 qwen3-1.7b:1024 llama-3.2-3b:1024 llama-3.1-8b:1024" \
  ROUNDS=3 timeout 380 bench/ab.sh "none=$B|--narrow 0" "planned=$B|" || exit 1
for q in fp8 int4; do
  OUT=$OUT/$q CASES="qwen2.5-0.5b:1024 llama-3.2-1b:1024 llama-3.1-8b:1024" ROUNDS=2 timeout 100 bench/ab.sh \
    "none=$B|--quantize $q --narrow 0" "planned=$B|--quantize $q"
done
tar czf $OUT/all.tgz -C $OUT bf16 fp8 int4 && rm -rf $OUT/bf16 $OUT/fp8 $OUT/int4
