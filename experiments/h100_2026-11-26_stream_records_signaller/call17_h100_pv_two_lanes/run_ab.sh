#!/usr/bin/env bash
# Attention's tile path with P.V on two lanes per output (pv) against 7db3300's build (new), same call,
# three rounds; then --trace 40 of 1B at 1024 of both.
set -u
mkdir -p /tmp/b && xz -dc .carry/pv/mk-bench-pv.xz > /tmp/b/mk-bench-pv && xz -dc .carry/pv/mk-bench-new.xz > /tmp/b/mk-bench-new && chmod +x /tmp/b/*
mkdir -p $OUT/ab
OUT=$OUT/ab CASES="llama-3.2-1b:128,1024 qwen3-1.7b:1024 llama-3.1-8b:1024" ROUNDS=3 timeout 450 bench/ab.sh \
  "new=/tmp/b/mk-bench-new|" "pv=/tmp/b/mk-bench-pv|"
for b in new pv; do timeout 50 /tmp/b/mk-bench-$b --preset llama-3.2-1b --depths 1024 -n 64 -r 1 --trace 40 > $OUT/ab/trace_1b_$b.txt 2>&1; done
grep -A6 'trace of step' $OUT/ab/trace_1b_*.txt | cut -c1-200
tar czf $OUT/all.tgz -C $OUT ab && rm -rf $OUT/ab
