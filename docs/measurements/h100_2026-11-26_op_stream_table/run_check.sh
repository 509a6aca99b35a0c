#!/usr/bin/env bash
# test_gpu on the op-stream table build, then the quantized formats and the H100 long-context depth on it.
set -u
mkdir -p /tmp/b && for f in .carry/st2/*.xz; do xz -dc "$f" > /tmp/b/$(basename "$f" .xz); done; chmod +x /tmp/b/*
O=$OUT/res; mkdir -p $O
export MK_FIXTURES=$PWD/tests/fixtures
nvidia-smi -L > $O/gpu.txt
timeout 300 /tmp/b/test_gpu > $O/test_gpu.log 2>&1; echo "test_gpu rc=$?" >> $O/gpu.txt
grep -E "^\[  (PASSED|FAILED) " $O/test_gpu.log
for q in fp8 int4; do timeout 120 /tmp/b/mk-bench --preset llama-3.1-8b --quantize $q --depths 1024 -n 64 -r 3 --json > $O/new_8b_$q.json 2> $O/new_8b_$q.err; done
timeout 120 /tmp/b/mk-bench --preset llama-3.2-1b --depths 16384 -n 64 -r 3 --json > $O/new_1b_16384.json 2> $O/new_1b_16384.err
tar czf $OUT/all.tgz -C $OUT res && rm -rf $O
