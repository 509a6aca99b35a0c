#!/usr/bin/env bash
# base vs new vs new with MK_TILE_MMA_OFF (the tensor-core tile path present but not run).
set -u
mkdir -p /tmp/b/base /tmp/b/new /tmp/b/off
xz -dc .carry/base/mk-bench.xz > /tmp/b/base/mk-bench; xz -dc .carry/nb/mk-bench.xz > /tmp/b/new/mk-bench; chmod +x /tmp/b/*/mk-bench
printf '#!/bin/sh\nMK_TILE_MMA_OFF=1 exec /tmp/b/new/mk-bench "$@"\n' > /tmp/b/off/mk-bench; chmod +x /tmp/b/off/mk-bench
bench/ab.sh "base=/tmp/b/base/mk-bench|" "new=/tmp/b/new/mk-bench|" "off=/tmp/b/off/mk-bench|"
for p in ${TRACE_PRESETS:-}; do
  for v in base new off; do
    timeout 90 /tmp/b/$v/mk-bench --preset $p --depths 1024 -n 64 -r 1 --trace 40 > $OUT/trace_${v}_$p.txt 2>&1
    echo "== $v $p"; grep -A4 'trace of step' $OUT/trace_${v}_$p.txt | tail -2 | cut -c1-150
  done
done
