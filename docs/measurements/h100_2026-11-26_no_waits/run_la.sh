#!/usr/bin/env bash
# The no-waits bound with the weight stream running ahead: --no-waits with --lookahead 0 (as measured
# before), 1 and 2, against the normal run, same binary (75d69c4's mk-bench), two rounds.
set -u
mkdir -p /tmp/b && xz -dc .carry/nw2/mk-bench.xz > /tmp/b/mk-bench && chmod +x /tmp/b/*
B=/tmp/b/mk-bench
mkdir -p $OUT/la
OUT=$OUT/la CASES="qwen2.5-0.5b:1024 llama-3.2-1b:128,1024 qwen3-1.7b:1024" ROUNDS=2 timeout 500 bench/ab.sh \
  "waits=$B|" "nowaits=$B|--no-waits" "nowaits_la1=$B|--no-waits --lookahead 1" "nowaits_la2=$B|--no-waits --lookahead 2"
tar czf $OUT/all.tgz -C $OUT la && rm -rf $OUT/la
