#!/usr/bin/env bash
# Qwen2's qkv bias staged in shared memory before the wait (new) against 4043beb's build (old), same
# call, three rounds; then --trace 40 of Qwen2.5-0.5B at 1024 with both.
set -u
mkdir -p /tmp/b && xz -dc .carry/qb/mk-bench.xz > /tmp/b/mk-bench && xz -dc .carry/rv/mk-bench.xz > /tmp/b/mk-bench-old && chmod +x /tmp/b/*
mkdir -p $OUT/qb
OUT=$OUT/qb CASES="qwen2.5-0.5b:128,1024 llama-3.2-1b:128,1024 qwen3-1.7b:1024 llama-3.1-8b:1024" ROUNDS=3 timeout 480 bench/ab.sh \
  "old=/tmp/b/mk-bench-old|" "new=/tmp/b/mk-bench|"
timeout 50 /tmp/b/mk-bench-old --preset qwen2.5-0.5b --depths 1024 -n 64 -r 1 --trace 40 > $OUT/qb/trace_qwen_old.txt 2>&1
timeout 50 /tmp/b/mk-bench --preset qwen2.5-0.5b --depths 1024 -n 64 -r 1 --trace 40 > $OUT/qb/trace_qwen_new.txt 2>&1
grep -A9 'trace of step' $OUT/qb/trace_qwen_*.txt
tar czf $OUT/all.tgz -C $OUT qb && rm -rf $OUT/qb
