#!/usr/bin/env bash
set -u
export PATH=$PATH:/usr/local/cuda/bin
O=$OUT
: 
mkdir -p /tmp/b && xz -dc .carry/if2/mk-bench-old.xz > /tmp/b/mk-bench-old && chmod +x /tmp/b/mk-bench-old
K=_ZN2mk3dev10monokernelILNS_12MatrixFormatE0ELb1ELb0ELb0ELb0EEEvNS0_12KernelParamsE
timeout 200 ncu --kernel-name regex:monokernel --launch-count 1 --section SourceCounters --import-source no \
  -o /tmp/p_old /tmp/b/mk-bench-old --preset llama-3.2-1b --depths 1024 -n 16 -r 1 > $O/ncu.log 2>&1
ncu --import /tmp/p_old.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip -9 > /tmp/s_old.csv.gz
mkdir -p /tmp/x && cd /tmp/x && cuobjdump -xelf all /tmp/b/mk-bench-old > /dev/null 2>&1
C=$(grep -l "$K" /tmp/x/*.cubin | head -1)
echo "cubin $C" > $O/attrib.txt
cd - > /dev/null
timeout 300 python3 .carry/ic/attribute.py "$C" "$K" /tmp/s_old.csv.gz >> $O/attrib.txt 2>&1

