#!/usr/bin/env bash
# Embed's row loaded in one round trip (new) against 3ce1b5c's build (old), same call, three rounds; then
# --trace 40 of Llama-3.2-1B and 3.1-8B at 1024 with both.
set -u
mkdir -p /tmp/b && xz -dc .carry/em/mk-bench.xz > /tmp/b/mk-bench && xz -dc .carry/qb/mk-bench.xz > /tmp/b/mk-bench-old && chmod +x /tmp/b/*
mkdir -p $OUT/em
OUT=$OUT/em CASES="llama-3.2-1b:128,1024 qwen2.5-0.5b:1024 llama-3.1-8b:1024" ROUNDS=3 timeout 420 bench/ab.sh \
  "old=/tmp/b/mk-bench-old|" "new=/tmp/b/mk-bench|"
for p in llama-3.2-1b llama-3.1-8b; do
  timeout 50 /tmp/b/mk-bench-old --preset $p --depths 1024 -n 64 -r 1 --trace 40 > $OUT/em/trace_${p}_old.txt 2>&1
  timeout 50 /tmp/b/mk-bench --preset $p --depths 1024 -n 64 -r 1 --trace 40 > $OUT/em/trace_${p}_new.txt 2>&1
done
grep -H -E ' embed | sample |step  ' $OUT/em/trace_*.txt
tar czf $OUT/all.tgz -C $OUT em && rm -rf $OUT/em
