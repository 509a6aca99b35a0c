#!/usr/bin/env bash
# Narrow row stages (ScheduleParams::narrow_workgroups): the same binary with the latency-bound stages cut
# into fewer blocks than workgroups, against the default schedule; then traces of two of them (Qwen2.5-0.5B).
set -u
mkdir -p /tmp/b && xz -dc .carry/nw/mk-bench.xz > /tmp/b/mk-bench && chmod +x /tmp/b/mk-bench
O=$OUT/res; mkdir -p $O
B=/tmp/b/mk-bench
OUT=$O CASES="qwen2.5-0.5b:1024 llama-3.2-1b:128,1024" ROUNDS=2 timeout 420 bench/ab.sh \
  "base=$B|" "q66=$B|--narrow 66 --narrow-ops qkv" "qo66=$B|--narrow 66 --narrow-ops qkv,o_proj" \
  "qod66=$B|--narrow 66 --narrow-ops qkv,o_proj,down" "qo33=$B|--narrow 33 --narrow-ops qkv,o_proj" "o66=$B|--narrow 66 --narrow-ops o_proj"
for v in base "qo66|--narrow 66 --narrow-ops qkv,o_proj"; do
  name=${v%%|*}; args=${v#*|}; [ "$name" = base ] && args=""
  timeout 60 $B $args --preset qwen2.5-0.5b --depths 1024 -n 64 -r 1 --trace 40 > $O/trace_$name.txt 2>&1
done
tar czf $OUT/all.tgz -C $OUT res && rm -rf $O
