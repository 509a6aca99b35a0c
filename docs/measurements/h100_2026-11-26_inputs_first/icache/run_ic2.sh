#!/usr/bin/env bash
# Instruction-fetch stalls of main's build against the patched build (inputs-first code present, off).
set -u
export PATH=$PATH:/usr/local/cuda/bin
mkdir -p /tmp/b && for f in .carry/if2/*.xz; do xz -dc "$f" > /tmp/b/$(basename "$f" .xz); done; chmod +x /tmp/b/*
O=$OUT
for v in old new; do
  bin=/tmp/b/mk-bench; [ $v = old ] && bin=/tmp/b/mk-bench-old
  for preset in llama-3.2-1b qwen2.5-0.5b; do
    timeout 200 ncu --kernel-name regex:monokernel --launch-count 1 --section WarpStateStats --section SourceCounters --import-source no \
      -o /tmp/prof_${v}_$preset $bin --preset $preset --depths 1024 -n 16 -r 1 > $O/ncu_${v}_$preset.log 2>&1
    ncu --import /tmp/prof_${v}_$preset.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip -9 > $O/src_${v}_$preset.csv.gz
    ncu --import /tmp/prof_${v}_$preset.ncu-rep --page details > $O/details_${v}_$preset.txt 2>&1
  done
done
