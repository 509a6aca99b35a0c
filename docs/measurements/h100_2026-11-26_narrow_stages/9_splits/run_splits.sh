#!/usr/bin/env bash
# A look ahead: Llama-3.2-1B with half the attention items (--splits 8: 64 items) next to the narrow
# o_proj, one binary, two rounds.
set -u
mkdir -p /tmp/b && xz -dc .carry/fin/mk-bench.xz > /tmp/b/mk-bench && chmod +x /tmp/b/mk-bench
B=/tmp/b/mk-bench
mkdir -p $OUT/splits
OUT=$OUT/splits CASES="llama-3.2-1b:128,1024,16384" ROUNDS=2 timeout 400 bench/ab.sh "none=$B|--narrow 0" "planned=$B|" \
  "s8=$B|--splits 8" "s8-none=$B|--splits 8 --narrow 0" "s8-qo=$B|--splits 8 --narrow 66 --narrow-ops qkv,o_proj"
tar czf $OUT/all.tgz -C $OUT splits && rm -rf $OUT/splits
