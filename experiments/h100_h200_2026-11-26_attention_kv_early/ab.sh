#!/usr/bin/env bash
# A/B of two mk-bench builds: .carry/base (main) vs .carry/nb (new). CASES, ROUNDS from the environment.
set -u
mkdir -p /tmp/b/base /tmp/b/new
xz -dc .carry/base/mk-bench.xz > /tmp/b/base/mk-bench; xz -dc .carry/nb/mk-bench.xz > /tmp/b/new/mk-bench; chmod +x /tmp/b/*/mk-bench
bench/ab.sh "base=/tmp/b/base/mk-bench|$BASE_ARGS" "new=/tmp/b/new/mk-bench|$NEW_ARGS" ${EXTRA:-}
tar czf $OUT/data.tgz -C $OUT ab && rm -rf $OUT/ab
