#!/usr/bin/env bash
# The signal from warp 1 with the records-based producer (new) against main's build (old, 3ce1b5c), same
# call: three rounds with waits, then two rounds of both with --no-waits.
set -u
mkdir -p /tmp/b && xz -dc .carry/sg2/mk-bench.xz > /tmp/b/mk-bench && xz -dc .carry/sg2/mk-bench-old.xz > /tmp/b/mk-bench-old && chmod +x /tmp/b/*
mkdir -p $OUT/ab $OUT/nw
OUT=$OUT/ab CASES="llama-3.2-1b:128,1024 qwen2.5-0.5b:1024 qwen3-1.7b:1024 llama-3.1-8b:1024" ROUNDS=3 timeout 400 bench/ab.sh \
  "old=/tmp/b/mk-bench-old|" "new=/tmp/b/mk-bench|"
OUT=$OUT/nw CASES="llama-3.2-1b:1024 qwen2.5-0.5b:1024" ROUNDS=2 timeout 150 bench/ab.sh \
  "old_nw=/tmp/b/mk-bench-old|--no-waits" "new_nw=/tmp/b/mk-bench|--no-waits"
tar czf $OUT/all.tgz -C $OUT ab nw && rm -rf $OUT/ab $OUT/nw
