#!/usr/bin/env bash
# Session 10, v2: tensor-core warp path, accumulators in registers, q rows over the FMA state.
set -u
B=.carry/ab
export MK_FIXTURES=$PWD/tests/fixtures
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi -L > $OUT/gpu.txt
# SASS of the default kernel (bf16, stream, no profile, flat, tile path) in both builds.
K=_ZN2mk3dev10monokernelILb0ELb1ELb0ELb0ELb0EEEvNS0_12KernelParamsE
for w in old new; do
  cuobjdump -sass -fun $K $B/$w/mk-bench 2>/dev/null | grep -E '^\s+/\*[0-9a-f]+\*/' | sed -E 's@/\*[0-9a-f]+\*/@@; s@/\* 0x[0-9a-f]+ \*/@@; s/ +/ /g' > $OUT/sass_default_$w.txt
done
wc -l $OUT/sass_default_*.txt | tee -a $OUT/gpu.txt
diff $OUT/sass_default_old.txt $OUT/sass_default_new.txt > $OUT/sass_default.diff; echo "default-kernel SASS diff lines: $(wc -l < $OUT/sass_default.diff)" | tee -a $OUT/gpu.txt
timeout 240 $B/new/test_gpu > $OUT/test_gpu.log 2>&1; echo "test_gpu rc=$?" | tee -a $OUT/gpu.txt
tail -3 $OUT/test_gpu.log
if grep -q "\[  PASSED  \] 18 tests" $OUT/test_gpu.log; then
  bench/ab_kernels.sh $B/old/mk-bench $B/new/mk-bench $OUT/ab 3 llama-3.2-1b:128,1024,8192,16384 qwen2.5-0.5b:1024,16384 llama-3.1-8b:1024,8192 > $OUT/ab.txt 2>&1
  cat $OUT/ab.txt
  $B/new/mk-bench --preset llama-3.2-1b --depths 16384 -n 64 -r 1 --trace 40 > $OUT/trace_new_16384.txt 2>&1
  $B/new/mk-bench --preset qwen2.5-0.5b --depths 16384 -n 64 -r 1 --trace 40 > $OUT/trace_new_qwen_16384.txt 2>&1
fi
tar czf $OUT/ab.tgz -C $OUT ab 2>/dev/null; rm -rf $OUT/ab
