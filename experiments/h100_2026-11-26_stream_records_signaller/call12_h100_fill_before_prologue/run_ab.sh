#!/usr/bin/env bash
# The free slots filled right after the wait, before the prologue (fp), against 7db3300's build (new),
# same call, three rounds; then --trace 40 of 1B at 1024 of both.
set -u
mkdir -p /tmp/b && xz -dc .carry/fp/mk-bench-fp.xz > /tmp/b/mk-bench-fp && xz -dc .carry/fp/mk-bench-new.xz > /tmp/b/mk-bench-new && chmod +x /tmp/b/*
mkdir -p $OUT/ab
OUT=$OUT/ab CASES="llama-3.2-1b:128,1024 qwen2.5-0.5b:1024 qwen3-1.7b:1024 llama-3.1-8b:1024" ROUNDS=3 timeout 450 bench/ab.sh \
  "new=/tmp/b/mk-bench-new|" "fp=/tmp/b/mk-bench-fp|"
for b in new fp; do timeout 50 /tmp/b/mk-bench-$b --preset llama-3.2-1b --depths 1024 -n 64 -r 1 --trace 40 > $OUT/ab/trace_1b_$b.txt 2>&1; done
grep -A12 'trace of step' $OUT/ab/trace_1b_*.txt | cut -c1-220
tar czf $OUT/all.tgz -C $OUT ab && rm -rf $OUT/ab
