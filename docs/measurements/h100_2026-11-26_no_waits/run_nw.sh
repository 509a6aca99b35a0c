#!/usr/bin/env bash
# What a step costs without the hand-offs: the same mk-bench (4043beb + --no-waits) with and without
# --no-waits, two rounds; then the per-instruction profile of both at depth 1024.
set -u
mkdir -p /tmp/b && xz -dc .carry/nw2/mk-bench.xz > /tmp/b/mk-bench && chmod +x /tmp/b/*
B=/tmp/b/mk-bench
mkdir -p $OUT/nw
OUT=$OUT/nw CASES="llama-3.2-1b:128,1024 qwen2.5-0.5b:1024 qwen3-1.7b:1024 llama-3.1-8b:1024" ROUNDS=2 timeout 400 bench/ab.sh \
  "waits=$B|" "nowaits=$B|--no-waits"
for p in llama-3.2-1b qwen2.5-0.5b llama-3.1-8b; do
  timeout 60 $B --preset $p --depths 1024 -n 64 -r 1 --profile > $OUT/nw/profile_${p}_waits.txt 2>&1
  timeout 60 $B --preset $p --depths 1024 -n 64 -r 1 --profile --no-waits > $OUT/nw/profile_${p}_nowaits.txt 2>&1
done
grep -h -A4 'per-instruction' $OUT/nw/profile_*.txt | head -60
tar czf $OUT/all.tgz -C $OUT nw && rm -rf $OUT/nw
