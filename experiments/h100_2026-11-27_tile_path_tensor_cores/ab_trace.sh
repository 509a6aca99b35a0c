#!/usr/bin/env bash
# A/B of .carry/base vs .carry/nb (CASES, ROUNDS), then --trace 40 of both for TRACE_PRESETS at depth 1024.
set -u
mkdir -p /tmp/b/base /tmp/b/new
xz -dc .carry/base/mk-bench.xz > /tmp/b/base/mk-bench; xz -dc .carry/nb/mk-bench.xz > /tmp/b/new/mk-bench; chmod +x /tmp/b/*/mk-bench
bench/ab.sh "base=/tmp/b/base/mk-bench|${BASE_ARGS:-}" "new=/tmp/b/new/mk-bench|${NEW_ARGS:-}"
for p in ${TRACE_PRESETS:-}; do
  for v in base new; do
    timeout 90 /tmp/b/$v/mk-bench --preset $p --depths 1024 -n 64 -r 1 --trace 40 > $OUT/trace_${v}_$p.txt 2>&1
    echo "== $v $p"; grep -A12 'trace of step' $OUT/trace_${v}_$p.txt | cut -c1-150
  done
done
