#!/usr/bin/env bash
# Narrow stages on quantized layers: which stages pay for fp8 and int4 (one binary, explicit --narrow).
set -u
mkdir -p /tmp/b && xz -dc .carry/nwb/mk-bench.xz > /tmp/b/mk-bench; chmod +x /tmp/b/*
B=/tmp/b/mk-bench
for q in fp8 int4; do
  mkdir -p $OUT/$q
  OUT=$OUT/$q CASES="llama-3.2-1b:1024 qwen2.5-0.5b:1024" ROUNDS=2 timeout 250 bench/ab.sh \
    "none=$B|--quantize $q --narrow 0" "o=$B|--quantize $q --narrow 66 --narrow-ops o_proj" \
    "qo=$B|--quantize $q --narrow 66 --narrow-ops qkv,o_proj" "qod=$B|--quantize $q --narrow 66 --narrow-ops qkv,o_proj,down" \
    "od=$B|--quantize $q --narrow 66 --narrow-ops o_proj,down"
done
tar czf $OUT/all.tgz -C $OUT fp8 int4 && rm -rf $OUT/fp8 $OUT/int4
