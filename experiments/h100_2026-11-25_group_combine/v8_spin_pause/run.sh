#!/usr/bin/env bash
# Eleventh session, v8: the pause between a waiting thread's counter polls, 32 ns (old = b999b3d) against
# 128 and 512 ns (builds with -DMK_SPIN_PAUSE_NS, patch.diff): is a late workgroup's poll slow because the
# other 131 keep the counter's line busy?
set -u
B=.carry/ab
nvidia-smi -L > $OUT/gpu.txt
for v in s128 s512; do
  timeout 250 bench/ab_kernels.sh $B/old/mk-bench $B/$v/mk-bench $OUT/ab_$v 2 llama-3.2-1b:128,1024 qwen2.5-0.5b:1024 > $OUT/ab_$v.txt 2>&1
  echo "== old vs $v"; cat $OUT/ab_$v.txt
done
for w in old s128 s512; do
  $B/$w/mk-bench --preset llama-3.2-1b --depths 1024 -n 64 -r 1 --trace 40 --trace-csv $OUT/ab_s128/trace_${w}_l1b.csv > $OUT/ab_s128/trace_${w}_l1b.txt 2>&1
done
python3 docs/measurements/h100_2026-11-25_group_combine/traces_b999b3d/tails.py $OUT/ab_s128/trace_old_l1b.csv $OUT/ab_s128/trace_s128_l1b.csv $OUT/ab_s128/trace_s512_l1b.csv | grep -E 'csv|start -> ready|tail'
tar czf $OUT/data.tgz -C $OUT ab_s128 ab_s512 2>/dev/null; rm -rf $OUT/ab_s128 $OUT/ab_s512
