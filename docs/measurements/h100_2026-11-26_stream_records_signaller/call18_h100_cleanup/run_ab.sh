#!/usr/bin/env bash
# The cleanup (cl: drain through StreamPlace, a dead helper removed) against 7db3300's build (new), same
# call, three rounds: no change expected beyond layout.
set -u
mkdir -p /tmp/b && xz -dc .carry/cl2/mk-bench-cl.xz > /tmp/b/mk-bench-cl && xz -dc .carry/cl2/mk-bench-new.xz > /tmp/b/mk-bench-new && chmod +x /tmp/b/*
mkdir -p $OUT/ab
OUT=$OUT/ab CASES="llama-3.2-1b:128,1024 qwen2.5-0.5b:1024 llama-3.1-8b:1024" ROUNDS=3 timeout 450 bench/ab.sh \
  "new=/tmp/b/mk-bench-new|" "cl=/tmp/b/mk-bench-cl|"
tar czf $OUT/all.tgz -C $OUT ab && rm -rf $OUT/ab
