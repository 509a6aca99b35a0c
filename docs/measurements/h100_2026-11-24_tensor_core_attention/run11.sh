#!/usr/bin/env bash
# Session 10, v3: + the warp path from shorter lengths on tensor cores. old = 6aad62d.
set -u
B=.carry/ab
export MK_FIXTURES=$PWD/tests/fixtures
nvidia-smi -L > $OUT/gpu.txt
timeout 240 $B/new/test_gpu > $OUT/test_gpu.log 2>&1; echo "test_gpu rc=$?" | tee -a $OUT/gpu.txt
tail -3 $OUT/test_gpu.log
if grep -q "\[  PASSED  \] 18 tests" $OUT/test_gpu.log; then
  bench/ab_kernels.sh $B/old/mk-bench $B/new/mk-bench $OUT/ab 3 llama-3.2-1b:128,1024,2048,4096,8192,16384 qwen2.5-0.5b:128,512,1024,4096,16384 llama-3.1-8b:1024,8192 > $OUT/ab.txt 2>&1
  cat $OUT/ab.txt
  mkdir -p $OUT/traces
  $B/new/mk-bench --preset llama-3.2-1b --depths 16384 -n 64 -r 1 --trace 40 --json > $OUT/traces/llama1b_16384.json 2> $OUT/traces/llama1b_16384.txt
  $B/new/mk-bench --preset qwen2.5-0.5b --depths 1024 -n 64 -r 1 --trace 40 --json > $OUT/traces/qwen_1024.json 2> $OUT/traces/qwen_1024.txt
  $B/new/mk-bench --preset qwen2.5-0.5b --depths 1024 -n 64 -r 1 --trace 40 > $OUT/traces/qwen_1024_table.txt 2>&1
  $B/new/mk-bench --preset llama-3.2-1b --depths 16384 -n 64 -r 1 --trace 40 > $OUT/traces/llama1b_16384_table.txt 2>&1
fi
tar czf $OUT/data.tgz -C $OUT ab traces 2>/dev/null; rm -rf $OUT/ab $OUT/traces
