#!/usr/bin/env bash
set -u
mkdir -p /tmp/b && xz -dc .carry/rl/mk-bench.xz > /tmp/b/mk-bench && xz -dc .carry/rl/test_gpu.xz > /tmp/b/test_gpu && chmod +x /tmp/b/*
timeout 120 /tmp/b/test_gpu --gtest_filter='*ClusterRelay*' 2>&1 | tail -15 | tee $OUT/relay_test.log
grep -q "PASSED  ] 1 test" $OUT/relay_test.log || exit 1
O=$OUT/res; mkdir -p $O
OUT=$O CASES="llama-3.2-1b:128,1024 llama-3.1-8b:1024" ROUNDS=2 timeout 420 bench/ab.sh \
  'w132=/tmp/b/mk-bench|' 'w105=/tmp/b/mk-bench|--workgroups 105' 'relay8=/tmp/b/mk-bench|--workgroups 105 --relay-cluster 8' \
  'w105e1=/tmp/b/mk-bench|--workgroups 105 --early 1' 'relay8e1=/tmp/b/mk-bench|--workgroups 105 --relay-cluster 8 --early 1'
/tmp/b/mk-bench --preset llama-3.2-1b --depths 1024 -n 64 --workgroups 105 --relay-cluster 8 --trace 40 > $O/trace_relay8.txt 2>&1
/tmp/b/mk-bench --preset llama-3.2-1b --depths 1024 -n 64 --workgroups 105 --trace 40 > $O/trace_w105.txt 2>&1
tar czf $OUT/all.tgz -C $OUT res && rm -rf $O
