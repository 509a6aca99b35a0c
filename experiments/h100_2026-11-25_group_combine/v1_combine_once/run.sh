#!/usr/bin/env bash
# Eleventh session, v1: attention's partials combined once per kv group by its last split (old = b999b3d).
set -u
B=.carry/ab
export MK_FIXTURES=$PWD/tests/fixtures
nvidia-smi -L > $OUT/gpu.txt
timeout 200 $B/new/test_gpu > $OUT/test_gpu.log 2>&1; echo "test_gpu rc=$?" | tee -a $OUT/gpu.txt
tail -3 $OUT/test_gpu.log
if grep -q "\[  PASSED  \] 18 tests" $OUT/test_gpu.log; then
  timeout 420 bench/ab_kernels.sh $B/old/mk-bench $B/new/mk-bench $OUT/ab 2 llama-3.2-1b:128,1024,16384 qwen2.5-0.5b:1024,16384 llama-3.1-8b:1024 > $OUT/ab.txt 2>&1
  cat $OUT/ab.txt
  $B/new/mk-bench --preset llama-3.2-1b --depths 1024 -n 64 -r 1 --trace 40 > $OUT/ab/trace_new_1024.txt 2>&1
  $B/old/mk-bench --preset llama-3.2-1b --depths 1024 -n 64 -r 1 --trace 40 > $OUT/ab/trace_old_1024.txt 2>&1
fi
tar czf $OUT/data.tgz -C $OUT ab 2>/dev/null; rm -rf $OUT/ab
