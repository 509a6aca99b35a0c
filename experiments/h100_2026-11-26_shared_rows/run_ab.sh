#!/usr/bin/env bash
# Shared GEMV row loop (new) against main's build (old): A/B, PC sampling of both at 1B/1024, and where
# the quantized kernels of an intermediate build spill.
set -u
export PATH=$PATH:/usr/local/cuda/bin
mkdir -p /tmp/b && for f in .carry/sr/*.xz; do xz -dc "$f" > /tmp/b/$(basename "$f" .xz); done; chmod +x /tmp/b/mk-bench*
O=$OUT/res; mkdir -p $O
python3 .carry/sr/spills.py /tmp/b/new6.cubin \
  _ZN2mk3dev10monokernelILNS_12MatrixFormatE2ELb1ELb0ELb0ELb1EEEvNS0_12KernelParamsE \
  _ZN2mk3dev10monokernelILNS_12MatrixFormatE3ELb1ELb1ELb0ELb0EEEvNS0_12KernelParamsE > $O/spills.txt 2>&1
OUT=$O CASES="llama-3.2-1b:128,1024 qwen2.5-0.5b:1024 llama-3.1-8b:1024" ROUNDS=3 timeout 400 bench/ab.sh \
  'old=/tmp/b/mk-bench-old|' 'new=/tmp/b/mk-bench|'
for v in old new; do
  bin=/tmp/b/mk-bench; [ $v = old ] && bin=/tmp/b/mk-bench-old
  timeout 100 ncu --kernel-name regex:monokernel --launch-count 1 --section SourceCounters --import-source no \
    -o /tmp/p_$v $bin --preset llama-3.2-1b --depths 1024 -n 16 -r 1 > $O/ncu_$v.log 2>&1
  ncu --import /tmp/p_$v.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip -9 > /tmp/s_$v.csv.gz
done
python3 .carry/sum_ncu.py /tmp/s_old.csv.gz /tmp/s_new.csv.gz > $O/ncu_stall_summary.txt 2>&1
tar czf $OUT/all.tgz -C $OUT res && rm -rf $O
