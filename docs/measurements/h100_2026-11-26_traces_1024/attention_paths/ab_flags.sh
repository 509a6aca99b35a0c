#!/usr/bin/env bash
# Main's build with and without flags: VARIANTS like "warp=--attention-path warp" (space-separated words joined by |).
set -u
mkdir -p /tmp/b/base && xz -dc .carry/base/mk-bench.xz > /tmp/b/base/mk-bench && chmod +x /tmp/b/base/mk-bench
args=("base=/tmp/b/base/mk-bench|")
IFS=';' read -r -a vs <<< "$VARIANTS"
for v in "${vs[@]}"; do args+=("${v%%=*}=/tmp/b/base/mk-bench|${v#*=}"); done
bench/ab.sh "${args[@]}"
