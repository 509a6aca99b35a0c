#!/usr/bin/env bash
# Narrow stages, second call: quantized layers (planned vs none, one binary), main's build against the
# planned schedule, and traces of both schedules.
set -u
mkdir -p /tmp/b && for f in .carry/nwb/*.xz; do xz -dc "$f" > /tmp/b/$(basename "$f" .xz); done; chmod +x /tmp/b/*
B=/tmp/b/mk-bench M=/tmp/b/mk-bench-main
mkdir -p $OUT/quant $OUT/main $OUT/trace
OUT=$OUT/quant CASES="llama-3.2-1b:1024 llama-3.1-8b:1024" ROUNDS=2 timeout 200 bench/ab.sh \
  "fp8-none=$B|--quantize fp8 --narrow 0" "fp8-planned=$B|--quantize fp8" "int4-none=$B|--quantize int4 --narrow 0" "int4-planned=$B|--quantize int4"
OUT=$OUT/main CASES="qwen2.5-0.5b:1024 llama-3.2-1b:128,1024" ROUNDS=2 timeout 150 bench/ab.sh "main=$M|" "planned=$B|"
for p in qwen2.5-0.5b llama-3.2-1b; do for v in none planned; do
  a=""; [ $v = none ] && a="--narrow 0"
  timeout 60 $B $a --preset $p --depths 1024 -n 64 -r 1 --trace 40 > $OUT/trace/${p}_$v.txt 2>&1
done; done
tar czf $OUT/all.tgz -C $OUT quant main trace && rm -rf $OUT/quant $OUT/main $OUT/trace
