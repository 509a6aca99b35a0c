#!/usr/bin/env bash
# --trace 40 and --profile (--json) of main's build for 8B and Qwen2.5-0.5B at depth 1024, and 1B at 1024.
set -u
mkdir -p /tmp/b/base && xz -dc .carry/base/mk-bench.xz > /tmp/b/base/mk-bench && chmod +x /tmp/b/base/mk-bench
B=/tmp/b/base/mk-bench
nvidia-smi -L > $OUT/gpu.txt
for p in llama-3.1-8b qwen2.5-0.5b llama-3.2-1b; do
  timeout 90 $B --preset $p --depths 1024 -n 64 -r 1 --trace 40 > $OUT/trace_$p.txt 2>&1
  timeout 90 $B --preset $p --depths 1024 -n 64 -r 1 --profile --json > $OUT/profile_$p.json 2> $OUT/profile_$p.txt
  timeout 90 $B --preset $p --depths 1024 -n 128 -r 3 --json > $OUT/bench_$p.json 2> $OUT/bench_$p.txt
  echo "== $p"; grep -A10 'trace of step' $OUT/trace_$p.txt | cut -c1-120
done
cd $OUT && tar czf traces.tgz trace_* profile_* bench_* && rm -f trace_* profile_* bench_*
