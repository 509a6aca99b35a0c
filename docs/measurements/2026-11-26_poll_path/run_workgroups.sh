#!/usr/bin/env bash
set -u
mkdir -p /tmp/b && xz -dc .carry/wg/mk-bench.xz > /tmp/b/mk-bench && xz -dc .carry/wg/test_gpu.xz > /tmp/b/test_gpu && chmod +x /tmp/b/*
O=$OUT/res; mkdir -p $O
OUT=$O TEST_GPU=/tmp/b/test_gpu TEST_COUNT=${TEST_COUNT:-35} CASES="llama-3.2-1b:128,1024 qwen2.5-0.5b:1024 llama-3.1-8b:1024" ROUNDS=2 timeout 540 bench/ab.sh \
  'w132=/tmp/b/mk-bench|' 'w120=/tmp/b/mk-bench|--workgroups 120' 'w112=/tmp/b/mk-bench|--workgroups 112' 'w105=/tmp/b/mk-bench|--workgroups 105'
tar czf $OUT/all.tgz -C $OUT res && rm -rf $O
