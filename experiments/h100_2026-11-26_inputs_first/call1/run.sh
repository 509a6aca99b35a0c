#!/usr/bin/env bash
# Call 1: test_gpu on the new build, then new --inputs-first 0 vs 1, then traces.
set -u
mkdir -p /tmp/b && for f in .carry/if1/*.xz; do xz -dc "$f" > /tmp/b/$(basename "$f" .xz); done; chmod +x /tmp/b/*
O=$OUT/res; mkdir -p $O
OUT=$O TEST_GPU=/tmp/b/test_gpu TEST_COUNT=35 CASES="llama-3.2-1b:128,1024 qwen2.5-0.5b:1024 llama-3.1-8b:1024" ROUNDS=3 timeout 480 bench/ab.sh \
  'off=/tmp/b/mk-bench|--inputs-first 0' 'on=/tmp/b/mk-bench|--inputs-first 1'
if grep -q "PASSED  \] 35 tests" $O/test_gpu.log 2>/dev/null || tar tzf $O/data.tgz >/dev/null 2>&1; then
  for v in 0 1; do timeout 60 /tmp/b/mk-bench --preset llama-3.2-1b --depths 1024 -n 64 --inputs-first $v --trace 40 > $O/trace_if$v.txt 2>&1; done
fi
tar czf $OUT/all.tgz -C $OUT res && rm -rf $O
