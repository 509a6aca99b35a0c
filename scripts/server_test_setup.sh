#!/usr/bin/env bash
# Installs the clients of the mk-server tests (ctest runs it as "server_test_setup"):
#
#   scripts/server_test_setup.sh OUT_DIR
#
# npm ci of tests/server/package.json + package-lock.json into OUT_DIR/node_modules (the official openai
# client, @huggingface/tokenizers, @huggingface/jinja and ajv at pinned versions), then copies the test scripts
# tests/server/*.mjs next to them (node resolves a script's packages from its own directory). The install
# is reused while the lock file is unchanged (MK_SERVER_TEST_FORCE=1 redoes it). Without node/npm or
# without the npm registry this FAILS (exit 1) with a message; it never skips.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 OUT_DIR" >&2
  exit 2
fi
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../tests/server" && pwd)"
out="$1"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

# shellcheck source=scripts/lib/npm_pinned.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/npm_pinned.sh"
die() { npm_die server_test_setup "$@"; }

require_node server_test_setup "the mk-server tests"
command -v curl >/dev/null || die "curl is not installed (the malformed-request test sends its requests with curl)"
cd "$out"
npm_ci_pinned server_test_setup "the mk-server tests" "$src" "$out" "${MK_SERVER_TEST_FORCE:-0}"
node --input-type=module -e '
  await import("openai"); await import("@huggingface/tokenizers"); await import("@huggingface/jinja"); await import("ajv/dist/2020.js");
' 2>/dev/null || die "npm packages missing in $out/node_modules after install (rerun with MK_SERVER_TEST_FORCE=1)"
cp "$src"/*.mjs "$out/"
echo "server_test_setup: clients ready in $out" >&2
