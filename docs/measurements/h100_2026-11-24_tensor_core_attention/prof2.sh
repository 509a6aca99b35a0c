#!/usr/bin/env bash
set -u
B=.carry/ab
NCU=/usr/local/cuda/bin/ncu
$NCU --section SourceCounters --section WarpStateStats -k regex:monokernel --launch-count 1 --export $OUT/warps -f $B/new/mk-bench --preset llama-3.2-1b --depths 16384 -n 8 -r 1 > $OUT/ncu_run.txt 2>&1
$NCU --import $OUT/warps.ncu-rep --page source --csv --print-source cuda,sass > $OUT/src_mixed.csv 2>$OUT/ncu_err.txt
python3 $B/ncu_summary.py $OUT/src_mixed.csv 45 > $OUT/summary.txt 2>&1
$NCU --import $OUT/warps.ncu-rep --page details --section WarpStateStats > $OUT/warp_state.txt 2>&1
gzip $OUT/src_mixed.csv; rm -f $OUT/warps.ncu-rep
cat $OUT/summary.txt; tail -30 $OUT/warp_state.txt
