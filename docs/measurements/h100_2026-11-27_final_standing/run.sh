#!/usr/bin/env bash
# The final tree's standing against issue 13's targets: .carry/fin's mk-bench, every target case, two rounds.
set -u
mkdir -p /tmp/b/fin && xz -dc .carry/fin/mk-bench.xz > /tmp/b/fin/mk-bench && chmod +x /tmp/b/fin/mk-bench
CASES="llama-3.2-1b:128,1024,16384 qwen2.5-0.5b:1024 llama-3.2-3b:1024 llama-3.1-8b:1024" ROUNDS=2 bench/ab.sh "final=/tmp/b/fin/mk-bench|"
