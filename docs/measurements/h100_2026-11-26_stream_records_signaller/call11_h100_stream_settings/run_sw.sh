#!/usr/bin/env bash
# With the cheaper chunk issue (7db3300), do the stream's settings measured best before still win?
# The same binary, default (early 2, lookahead 0, 48/56 KiB slots) against early 1 and 3, lookahead 1,
# 32 and 24 KiB slots; two rounds.
set -u
mkdir -p /tmp/b && xz -dc .carry/sw/mk-bench.xz > /tmp/b/mk-bench && chmod +x /tmp/b/*
B=/tmp/b/mk-bench
mkdir -p $OUT/sw
OUT=$OUT/sw CASES="llama-3.2-1b:128,1024 qwen2.5-0.5b:1024 llama-3.1-8b:1024" ROUNDS=2 timeout 560 bench/ab.sh \
  "base=$B|" "early1=$B|--early 1" "early3=$B|--early 3" "la1=$B|--lookahead 1" "slot32=$B|--slot-kib 32" "slot24=$B|--slot-kib 24"
tar czf $OUT/all.tgz -C $OUT sw && rm -rf $OUT/sw
