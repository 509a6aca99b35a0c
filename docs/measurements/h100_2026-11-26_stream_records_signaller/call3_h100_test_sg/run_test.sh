#!/usr/bin/env bash
# The signal from warp 1 (thread 32) and the records-based producer (sg): test_gpu, then --no-waits --profile.
set -u
mkdir -p /tmp/b && xz -dc .carry/sg/test_gpu.xz > /tmp/b/test_gpu && xz -dc .carry/sg/mk-bench.xz > /tmp/b/mk-bench && chmod +x /tmp/b/*
export MK_FIXTURES=$PWD/tests/fixtures
nvidia-smi -L > $OUT/gpu.txt
timeout 400 /tmp/b/test_gpu > $OUT/test_gpu.log 2>&1; echo "test_gpu rc=$?" | tee -a $OUT/gpu.txt
grep -E "^\[  (PASSED|FAILED) |FAILED" $OUT/test_gpu.log | head
grep -q "PASSED  \] 35 tests" $OUT/test_gpu.log || exit 1
B=/tmp/b/mk-bench
mkdir -p $OUT/prof
for p in qwen2.5-0.5b llama-3.2-1b; do
  timeout 60 $B --preset $p --depths 1024 -n 64 -r 2 --profile --no-waits > $OUT/prof/${p}_nowaits.txt 2>&1
done
grep -H -A3 'depth   1024:' $OUT/prof/*.txt | grep -v chunk_norm | cut -c1-250
grep -H ' 1024  ' $OUT/prof/*.txt
tar czf $OUT/prof.tgz -C $OUT prof && rm -rf $OUT/prof
