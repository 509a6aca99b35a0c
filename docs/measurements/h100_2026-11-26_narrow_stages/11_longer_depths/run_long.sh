#!/usr/bin/env bash
# Narrow stages at longer depths: planned against none, one binary, two rounds.
set -u
mkdir -p /tmp/b && xz -dc .carry/fin/mk-bench.xz > /tmp/b/mk-bench && chmod +x /tmp/b/mk-bench
B=/tmp/b/mk-bench
mkdir -p $OUT/long
OUT=$OUT/long CASES="qwen2.5-0.5b:4096,16384 llama-3.2-1b:4096" ROUNDS=2 timeout 400 bench/ab.sh "none=$B|--narrow 0" "planned=$B|"
tar czf $OUT/all.tgz -C $OUT long && rm -rf $OUT/long
