#!/usr/bin/env bash
# ncu warp-stall samples by source line, Qwen2.5-0.5B and Llama-3.2-1B at depth 1024, with and without
# --no-waits (3ce1b5c's mk-bench is not carried; the --no-waits build 75d69c4 is: the kernel is 4043beb's).
set -u
export PATH=$PATH:/usr/local/cuda/bin
mkdir -p /tmp/b && xz -dc .carry/nw2/mk-bench.xz > /tmp/b/mk-bench && chmod +x /tmp/b/mk-bench
mkdir -p /tmp/x && (cd /tmp/x && cuobjdump -xelf all /tmp/b/mk-bench > /dev/null 2>&1)
for preset in qwen2.5-0.5b llama-3.2-1b; do
  for mode in waits nowaits; do
    flag=; [ $mode = nowaits ] && flag=--no-waits
    timeout 150 ncu --kernel-name regex:monokernel --launch-count 1 --section SourceCounters --section WarpStateStats --import-source no \
      -o /tmp/p_${preset}_$mode /tmp/b/mk-bench $flag --preset $preset --depths 1024 -n 16 -r 1 > $OUT/ncu_${preset}_$mode.log 2>&1
    ncu --import /tmp/p_${preset}_$mode.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip -9 > /tmp/s.csv.gz
    name=$(zcat /tmp/s.csv.gz | head -1)
    for K in _ZN2mk3dev10monokernelILNS_12MatrixFormatE0ELb1ELb0ELb0ELb1EEEvNS0_12KernelParamsE _ZN2mk3dev10monokernelILNS_12MatrixFormatE0ELb1ELb0ELb0ELb0EEEvNS0_12KernelParamsE; do
      C=$(grep -l "$K" /tmp/x/*.cubin | head -1)
      [ -n "$C" ] || continue
      timeout 200 python3 .carry/nc/stall_lines.py "$C" "$K" /tmp/s.csv.gz > $OUT/stalls_${preset}_${mode}_$(echo $K | grep -o 'Lb.EEEv').txt 2>&1
    done
    echo "$preset $mode: $name" >> $OUT/names.txt
  done
done
head -30 $OUT/stalls_qwen*nowaits*.txt
