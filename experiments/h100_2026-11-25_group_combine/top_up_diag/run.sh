#!/usr/bin/env bash
# Eleventh session: where the weight stream's top-up spends its time (diagnostic build, diag_patch.diff).
set -u
B=.carry/ab
nvidia-smi -L > $OUT/gpu.txt
mkdir -p $OUT/ab
$B/diag/mk-bench --preset llama-3.2-1b --depths 1024 -n 64 -r 1 --trace 40 --trace-csv $OUT/ab/diag_l1b.csv > $OUT/ab/diag_l1b.txt 2>&1
$B/diag/mk-bench --preset qwen2.5-0.5b --depths 1024 -n 64 -r 1 --trace 40 --trace-csv $OUT/ab/diag_qw.csv > $OUT/ab/diag_qw.txt 2>&1
python3 docs/measurements/h100_2026-11-25_group_combine/top_up_diag/split.py $OUT/ab/diag_l1b.csv $OUT/ab/diag_qw.csv
tar czf $OUT/data.tgz -C $OUT ab 2>/dev/null; rm -rf $OUT/ab
