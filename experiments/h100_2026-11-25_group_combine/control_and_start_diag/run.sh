#!/usr/bin/env bash
# Eleventh session: (1) control: b999b3d built in /work/base (old) vs the same commit rebuilt in the main
# checkout (new), to see whether a rebuild alone moves the numbers; (2) a diagnostic build whose trace
# fields 2-3 hold thread 0's time after the prestage and after the stream's top-up (bit 0 of field 3: the
# inputs were complete then), to split a late workgroup's start -> ready.
set -u
B=.carry/ab
nvidia-smi -L > $OUT/gpu.txt
timeout 300 bench/ab_kernels.sh $B/old/mk-bench $B/new/mk-bench $OUT/ab 3 llama-3.2-1b:128,1024 qwen2.5-0.5b:1024 > $OUT/ab.txt 2>&1
cat $OUT/ab.txt
$B/diag/mk-bench --preset llama-3.2-1b --depths 1024 -n 64 -r 1 --trace 40 --trace-csv $OUT/ab/diag_l1b.csv > $OUT/ab/diag_l1b.txt 2>&1
$B/diag/mk-bench --preset qwen2.5-0.5b --depths 1024 -n 64 -r 1 --trace 40 --trace-csv $OUT/ab/diag_qw.csv > $OUT/ab/diag_qw.txt 2>&1
python3 docs/measurements/h100_2026-11-25_group_combine/control_and_start_diag/split.py $OUT/ab/diag_l1b.csv $OUT/ab/diag_qw.csv
tar czf $OUT/data.tgz -C $OUT ab 2>/dev/null; rm -rf $OUT/ab
