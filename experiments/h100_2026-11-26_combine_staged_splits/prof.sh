#!/usr/bin/env bash
# --profile and --trace 40 of base and new at one case ($PRESET $DEPTH).
set -u
mkdir -p /tmp/b/base /tmp/b/new
xz -dc .carry/base/mk-bench.xz > /tmp/b/base/mk-bench; xz -dc .carry/nb/mk-bench.xz > /tmp/b/new/mk-bench; chmod +x /tmp/b/*/mk-bench
nvidia-smi -L > $OUT/gpu.txt
for v in base new; do
  timeout 60 /tmp/b/$v/mk-bench --preset $PRESET --depths $DEPTH -n 64 -r 1 --profile --json > $OUT/profile_$v.json 2> $OUT/profile_$v.txt
  timeout 60 /tmp/b/$v/mk-bench --preset $PRESET --depths $DEPTH -n 64 -r 1 --trace 40 > $OUT/trace_$v.txt 2>&1
  echo "== $v"; grep -h "pro " $OUT/profile_$v.* | cut -c1-200 | head -3; grep -A8 'trace of step' $OUT/trace_$v.txt | cut -c1-120
done
