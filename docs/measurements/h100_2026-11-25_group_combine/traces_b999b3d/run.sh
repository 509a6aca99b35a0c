#!/usr/bin/env bash
# Eleventh session: per-instruction timestamps of one step (b999b3d's build), to see where stage tails come from.
set -u
B=.carry/ab/old
nvidia-smi -L > $OUT/gpu.txt
mkdir -p $OUT/tr
for t in 40 41 42; do
  $B/mk-bench --preset llama-3.2-1b --depths 1024 -n 64 -r 1 --trace $t --trace-csv $OUT/tr/l1b_1024_s$t.csv --profile-csv $OUT/tr/l1b_1024_prof_s$t.csv > $OUT/tr/l1b_1024_s$t.txt 2>&1
  $B/mk-bench --preset qwen2.5-0.5b --depths 1024 -n 64 -r 1 --trace $t --trace-csv $OUT/tr/qw_1024_s$t.csv > $OUT/tr/qw_1024_s$t.txt 2>&1
done
$B/mk-bench --preset llama-3.1-8b --depths 1024 -n 32 -r 1 --trace 20 --trace-csv $OUT/tr/l8b_1024_s20.csv > $OUT/tr/l8b_1024_s20.txt 2>&1
ls -la $OUT/tr | head -20
tar czf $OUT/tr.tgz -C $OUT tr; rm -rf $OUT/tr
