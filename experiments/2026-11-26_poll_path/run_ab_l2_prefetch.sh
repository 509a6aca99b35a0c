#!/usr/bin/env bash
# A/B of the L2-prefetched early chunks (this session); binaries xz-compressed under .carry/.
set -u
mkdir -p /tmp/b/old /tmp/b/new
xz -dc .carry/old/mk-bench.xz > /tmp/b/old/mk-bench && xz -dc .carry/new/mk-bench.xz > /tmp/b/new/mk-bench && chmod +x /tmp/b/*/mk-bench
/tmp/b/new/mk-bench --help | grep -A1 -- --prefetch | head -3
O=$OUT/res; mkdir -p $O
OUT=$O CASES="${CASES:-llama-3.2-1b:128,1024 qwen2.5-0.5b:1024 llama-3.1-8b:1024}" ROUNDS=${ROUNDS:-2} timeout ${ABT:-540} bench/ab.sh \
  'old=/tmp/b/old/mk-bench|' 'p0=/tmp/b/new/mk-bench|' "$@"
tar czf $OUT/all.tgz -C $OUT res && rm -rf $O
