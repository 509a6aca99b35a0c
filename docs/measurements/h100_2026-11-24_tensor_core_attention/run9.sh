#!/usr/bin/env bash
# Session 10: tensor-core warp path. old = 6aad62d, new = working tree.
set -u
B=.carry/ab
export MK_FIXTURES=$PWD/tests/fixtures
nvidia-smi -L > $OUT/gpu.txt
timeout 240 $B/new/test_gpu > $OUT/test_gpu.log 2>&1; echo "test_gpu rc=$?" | tee -a $OUT/gpu.txt
tail -3 $OUT/test_gpu.log
grep -E "OK \]|FAILED \]" $OUT/test_gpu.log | head -30
if grep -q "\[  PASSED  \] 18 tests" $OUT/test_gpu.log; then
  bench/ab_kernels.sh $B/old/mk-bench $B/new/mk-bench $OUT/ab 2 llama-3.2-1b:128,1024,8192,16384 qwen2.5-0.5b:1024,16384 llama-3.1-8b:8192 > $OUT/ab.txt 2>&1
  cat $OUT/ab.txt
  $B/new/mk-bench --preset llama-3.2-1b --depths 16384 -n 64 -r 1 --trace 40 > $OUT/trace_new_16384.txt 2>&1
fi
tar czf $OUT/ab.tgz -C $OUT ab 2>/dev/null; rm -rf $OUT/ab
