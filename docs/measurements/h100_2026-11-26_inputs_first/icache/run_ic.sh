#!/usr/bin/env bash
set -u
O=$OUT; .carry/ic/icache2 > $O/icache2.txt 2>&1
mkdir -p /tmp/b && xz -dc .carry/if2/mk-bench-old.xz > /tmp/b/mk-bench && chmod +x /tmp/b/mk-bench
export PATH=$PATH:/usr/local/cuda/bin
which ncu cuobjdump nvdisasm > $O/tools.txt 2>&1
K=_ZN2mk3dev10monokernelILNS_12MatrixFormatE0ELb1ELb0ELb0ELb0EEEvNS0_12KernelParamsE
cuobjdump -sass -fun $K /tmp/b/mk-bench > $O/sass_bf16_stream.txt 2>&1
cuobjdump -lelf /tmp/b/mk-bench > $O/lelf.txt 2>&1
timeout 240 ncu --kernel-name regex:monokernel --launch-count 1 --section WarpStateStats --section SourceCounters --import-source no \
  -o $O/prof /tmp/b/mk-bench --preset llama-3.2-1b --depths 1024 -n 16 -r 1 > $O/ncu.log 2>&1
ls -la $O >> $O/tools.txt
[ -f $O/prof.ncu-rep ] && ncu --import $O/prof.ncu-rep --page details > $O/ncu_details.txt 2>&1
[ -f $O/prof.ncu-rep ] && ncu --import $O/prof.ncu-rep --page source --csv --print-source sass > $O/ncu_source.csv 2>&1
cd $O && tar czf ic.tgz *.txt *.log *.csv 2>/dev/null; rm -f sass_bf16_stream.txt ncu_source.csv
