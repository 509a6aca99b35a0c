#!/usr/bin/env bash
# test_gpu on the new build (its kernel reads each op's early chunks from the host's table), then an A/B
# of its settings in one call: base = the new build set as main
# (narrow stages' early 2, rotation), early = narrow blocks issue all their chunks early (-1),
# place = a narrow o_proj on the workgroups of the last attention splits, both = the two together.
set -u
mkdir -p /tmp/b && xz -dc .carry/ep/mk-bench.xz > /tmp/b/mk-bench && xz -dc .carry/ep/test_gpu.xz > /tmp/b/test_gpu && chmod +x /tmp/b/*
mkdir -p $OUT/ep
B=/tmp/b/mk-bench
OUT=$OUT/ep TEST_GPU=/tmp/b/test_gpu TEST_COUNT=35 CASES="qwen2.5-0.5b:1024 llama-3.2-1b:128,1024 qwen3-1.7b:1024" ROUNDS=2 timeout 480 bench/ab.sh \
  "base=$B|--narrow-early 2 --narrow-placement rotation" "early=$B|--narrow-early -1 --narrow-placement rotation" \
  "place=$B|--narrow-early 2 --narrow-placement inactive-splits" "both=$B|--narrow-early -1 --narrow-placement inactive-splits"
tar czf $OUT/all.tgz -C $OUT ep && rm -rf $OUT/ep
