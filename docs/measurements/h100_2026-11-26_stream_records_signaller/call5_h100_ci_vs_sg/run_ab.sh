#!/usr/bin/env bash
# Records-based producer alone (ci) against it with the signal from warp 1 (sg), same call, three rounds.
set -u
mkdir -p /tmp/b && xz -dc .carry/cs/mk-bench-ci.xz > /tmp/b/mk-bench-ci && xz -dc .carry/cs/mk-bench-sg.xz > /tmp/b/mk-bench-sg && chmod +x /tmp/b/*
mkdir -p $OUT/ab $OUT/nw
OUT=$OUT/ab CASES="llama-3.2-1b:128,1024 qwen2.5-0.5b:1024 qwen3-1.7b:1024 llama-3.1-8b:1024" ROUNDS=3 timeout 400 bench/ab.sh \
  "ci=/tmp/b/mk-bench-ci|" "sg=/tmp/b/mk-bench-sg|"
OUT=$OUT/nw CASES="llama-3.2-1b:1024 qwen2.5-0.5b:1024" ROUNDS=2 timeout 150 bench/ab.sh \
  "ci_nw=/tmp/b/mk-bench-ci|--no-waits" "sg_nw=/tmp/b/mk-bench-sg|--no-waits"
for b in ci sg; do timeout 50 /tmp/b/mk-bench-$b --preset llama-3.2-1b --depths 1024 -n 64 -r 1 --trace 40 > $OUT/ab/trace_1b_$b.txt 2>&1; done
grep -A12 'trace of step' $OUT/ab/trace_1b_*.txt | cut -c1-220
tar czf $OUT/all.tgz -C $OUT ab nw && rm -rf $OUT/ab $OUT/nw
