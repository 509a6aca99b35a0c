#!/usr/bin/env bash
# Installs the clients of the mk-server tests (ctest runs it as "server_test_setup"):
#
#   scripts/server_test_setup.sh OUT_DIR
#
# npm ci of tests/server/package.json + package-lock.json into OUT_DIR/node_modules (the official openai
# client, @huggingface/tokenizers and @huggingface/jinja at pinned versions), then copies the test scripts
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

die() {
  echo "server_test_setup: FAIL: $*" >&2
  exit 1
}

command -v node >/dev/null || die "node is not installed (the mk-server tests need node >= 18 and npm)"
command -v npm >/dev/null || die "npm is not installed (the mk-server tests need node >= 18 and npm)"
command -v curl >/dev/null || die "curl is not installed (the malformed-request test sends its requests with curl)"
node_major="$(node -p 'process.versions.node.split(".")[0]')"
[[ "$node_major" -ge 18 ]] || die "node $(node --version) is too old (need >= 18)"

cd "$out"
if [[ "${MK_SERVER_TEST_FORCE:-0}" == 1 ]] || ! cmp -s "$src/package-lock.json" "$out/.installed-lock.json" ||
   [[ ! -d node_modules ]]; then
  cp "$src/package.json" "$src/package-lock.json" "$out/"
  rm -f "$out/.installed-lock.json"
  echo "server_test_setup: npm ci in $out" >&2
  if ! timeout 600 npm ci --no-audit --no-fund --loglevel=error >"$out/npm.log" 2>&1; then
    cat "$out/npm.log" >&2
    die "npm ci failed (see above and $out/npm.log): the mk-server tests need the npm registry" \
        "($(npm config get registry 2>/dev/null)); they do not pass without it"
  fi
  cp "$src/package-lock.json" "$out/.installed-lock.json"
fi
node --input-type=module -e '
  await import("openai"); await import("@huggingface/tokenizers"); await import("@huggingface/jinja");
' 2>/dev/null || die "npm packages missing in $out/node_modules after install (rerun with MK_SERVER_TEST_FORCE=1)"
cp "$src"/*.mjs "$out/"
echo "server_test_setup: clients ready in $out" >&2
