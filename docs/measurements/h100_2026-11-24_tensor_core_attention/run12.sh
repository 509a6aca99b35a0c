#!/usr/bin/env bash
# Session 10, v4: the warp path past 192 positions a split on tensor cores. old = 6aad62d.
set -u
B=.carry/ab
export MK_FIXTURES=$PWD/tests/fixtures
nvidia-smi -L > $OUT/gpu.txt
timeout 200 $B/new/test_gpu > $OUT/test_gpu.log 2>&1; echo "test_gpu rc=$?" | tee -a $OUT/gpu.txt
tail -3 $OUT/test_gpu.log
if grep -q "\[  PASSED  \] 18 tests" $OUT/test_gpu.log; then
  bench/ab_kernels.sh $B/old/mk-bench $B/new/mk-bench $OUT/ab 3 llama-3.2-1b:128,1024,2048,3072,4096,16384 qwen2.5-0.5b:128,1024 > $OUT/ab.txt 2>&1
  cat $OUT/ab.txt
  timeout 240 python3 scripts/gpu_check_real_shapes.py $B/new $OUT/real qwen2.5-0.5b > $OUT/real_shapes.log 2>&1; echo "real shapes rc=$?" | tee -a $OUT/gpu.txt
  tail -15 $OUT/real_shapes.log
fi
tar czf $OUT/data.tgz -C $OUT ab 2>/dev/null; rm -rf $OUT/ab; find $OUT/real -name "*.safetensors" -delete 2>/dev/null; tar czf $OUT/real.tgz -C $OUT real 2>/dev/null; rm -rf $OUT/real
