#!/usr/bin/env bash
# test_gpu of .carry/nt, then .carry/nb's mk-bench with VARIANTS (name=flags;...) interleaved.
set -u
mkdir -p /tmp/b/nb && xz -dc .carry/nt/test_gpu.xz > /tmp/b/test_gpu && chmod +x /tmp/b/test_gpu
xz -dc .carry/nb/mk-bench.xz > /tmp/b/nb/mk-bench && chmod +x /tmp/b/nb/mk-bench
export MK_FIXTURES=$PWD/tests/fixtures
nvidia-smi -L > $OUT/gpu.txt
timeout 300 /tmp/b/test_gpu ${FILTER:-} > $OUT/test_gpu.log 2>&1; echo "test_gpu rc=$?" | tee -a $OUT/gpu.txt
grep -E "^\[  (PASSED|FAILED) |FAILED" $OUT/test_gpu.log | head -20
args=()
IFS=';' read -r -a vs <<< "$VARIANTS"
for v in "${vs[@]}"; do args+=("${v%%=*}=/tmp/b/nb/mk-bench|${v#*=}"); done
bench/ab.sh "${args[@]}"
