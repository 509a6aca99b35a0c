#!/usr/bin/env bash
# The three changes together (new: records-based producer, signal from warp 1, consumers' place advanced
# row by row) against main's build (old, 3ce1b5c), same call, three rounds; then --trace 40 of 1B at 1024.
set -u
mkdir -p /tmp/b && xz -dc .carry/fin2/mk-bench.xz > /tmp/b/mk-bench && xz -dc .carry/fin2/mk-bench-old.xz > /tmp/b/mk-bench-old && chmod +x /tmp/b/*
mkdir -p $OUT/ab
OUT=$OUT/ab CASES="llama-3.2-1b:128,1024,16384 qwen2.5-0.5b:1024 qwen3-1.7b:1024 llama-3.1-8b:1024" ROUNDS=3 timeout 450 bench/ab.sh \
  "old=/tmp/b/mk-bench-old|" "new=/tmp/b/mk-bench|"
for b in mk-bench-old mk-bench; do timeout 50 /tmp/b/$b --preset llama-3.2-1b --depths 1024 -n 64 -r 1 --trace 40 > $OUT/ab/trace_1b_$b.txt 2>&1; done
grep -A12 'trace of step' $OUT/ab/trace_1b_*.txt | cut -c1-220
tar czf $OUT/all.tgz -C $OUT ab && rm -rf $OUT/ab
