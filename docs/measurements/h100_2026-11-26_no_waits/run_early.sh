#!/usr/bin/env bash
# Is thread 0's serial section the early chunks' issue? --no-waits --profile with --early 2 (default)
# and --early 0, Qwen2.5-0.5B and Llama-3.2-1B at depth 1024 (75d69c4's --no-waits build).
set -u
mkdir -p /tmp/b && xz -dc .carry/nw2/mk-bench.xz > /tmp/b/mk-bench && chmod +x /tmp/b/*
B=/tmp/b/mk-bench
mkdir -p $OUT/early
for p in qwen2.5-0.5b llama-3.2-1b; do
  for e in 2 0; do
    timeout 60 $B --preset $p --depths 1024 -n 64 -r 2 --profile --no-waits --early $e > $OUT/early/${p}_early$e.txt 2>&1
  done
done
grep -H -A3 'depth   1024:' $OUT/early/*.txt | grep -v chunk_norm | cut -c1-250
grep -H ' 1024  ' $OUT/early/*.txt
tar czf $OUT/early.tgz -C $OUT early && rm -rf $OUT/early
