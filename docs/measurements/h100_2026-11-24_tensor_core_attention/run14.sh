#!/usr/bin/env bash
# Session 10, v6: chunk copies with per-lane fixed offsets. old = d35948b (prev), new = v6.
set -u
B=.carry/ab
export MK_FIXTURES=$PWD/tests/fixtures
nvidia-smi -L > $OUT/gpu.txt
timeout 200 $B/new/test_gpu > $OUT/test_gpu.log 2>&1; echo "test_gpu rc=$?" | tee -a $OUT/gpu.txt
tail -3 $OUT/test_gpu.log
if grep -q "\[  PASSED  \] 18 tests" $OUT/test_gpu.log; then
  bench/ab_kernels.sh $B/prev/mk-bench $B/new/mk-bench $OUT/ab 3 llama-3.2-1b:4096,16384 qwen2.5-0.5b:1024,16384 llama-3.1-8b:8192 > $OUT/ab.txt 2>&1
  cat $OUT/ab.txt
fi
tar czf $OUT/data.tgz -C $OUT ab 2>/dev/null; rm -rf $OUT/ab
