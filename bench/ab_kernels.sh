#!/usr/bin/env bash
# A/B of two mk-bench builds in one call on a GPU machine (bench/ab.sh with the variants old and new):
#   bench/ab_kernels.sh OLD_MK_BENCH NEW_MK_BENCH OUT_DIR [ROUNDS] [CASES...]
# A case is PRESET:DEPTHS, e.g. llama-3.2-1b:128,1024 (default: the issue-13 set). Results: OUT_DIR/table.txt
# and OUT_DIR/data.tgz (every --json).
set -u
old=$1 new=$2
mkdir -p "$3"
cases="${*:5}"
OUT=$3 ROUNDS=${4:-2} CASES="${cases:-llama-3.2-1b:128,1024,16384 qwen2.5-0.5b:1024 llama-3.1-8b:1024}" \
  exec "$(dirname "$0")/ab.sh" "old=$old|" "new=$new|"
