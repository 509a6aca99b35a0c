#!/usr/bin/env bash
# Eleventh session: one version against b999b3d (old) in one call: test_gpu on the new build, then
# bench/ab_kernels.sh (three interleaved rounds) and one traced step of 1B and Qwen2.5-0.5B at 1024 from each
# build, summarised by traces_b999b3d/tails.py. Binaries in .carry/ab/{old,new}. Versions v2-v7, v9 and v10 ran
# this script (each as its folder's run.sh, identical but for its first comment line).
set -u
B=.carry/ab
export MK_FIXTURES=$PWD/tests/fixtures
nvidia-smi -L > $OUT/gpu.txt
timeout 200 $B/new/test_gpu > $OUT/test_gpu.log 2>&1; echo "test_gpu rc=$?" | tee -a $OUT/gpu.txt
tail -1 $OUT/test_gpu.log
if grep -q "\[  PASSED  \] 18 tests" $OUT/test_gpu.log; then
  timeout 400 bench/ab_kernels.sh $B/old/mk-bench $B/new/mk-bench $OUT/ab 3 llama-3.2-1b:128,1024,16384 qwen2.5-0.5b:1024,16384 llama-3.1-8b:1024 > $OUT/ab.txt 2>&1
  cat $OUT/ab.txt
  for w in old new; do
    $B/$w/mk-bench --preset llama-3.2-1b --depths 1024 -n 64 -r 1 --trace 40 --trace-csv $OUT/ab/trace_${w}_l1b.csv > $OUT/ab/trace_${w}_l1b.txt 2>&1
    $B/$w/mk-bench --preset qwen2.5-0.5b --depths 1024 -n 64 -r 1 --trace 40 --trace-csv $OUT/ab/trace_${w}_qw.csv > $OUT/ab/trace_${w}_qw.txt 2>&1
  done
  python3 docs/measurements/h100_2026-11-25_group_combine/traces_b999b3d/tails.py $OUT/ab/trace_old_l1b.csv $OUT/ab/trace_new_l1b.csv $OUT/ab/trace_old_qw.csv $OUT/ab/trace_new_qw.csv | grep -E 'csv|start -> ready' 
fi
tar czf $OUT/data.tgz -C $OUT ab 2>/dev/null; rm -rf $OUT/ab
