# Shared by the scripts that install pinned npm packages for the tests (scripts/tokenizer_reference.sh,
# scripts/server_test_setup.sh). Source it. Every failure prints "TAG: FAIL: ..." and exits 1: the
# tests these packages serve never skip.

# npm_die TAG MESSAGE...
npm_die() {
  local tag=$1
  shift
  echo "$tag: FAIL: $*" >&2
  exit 1
}

# require_node TAG WHAT: node >= 18 and npm are installed (WHAT, e.g. "the mk-server tests", need them).
require_node() {
  local tag=$1 what=$2 major
  command -v node >/dev/null || npm_die "$tag" "node is not installed ($what need node >= 18 and npm)"
  command -v npm >/dev/null || npm_die "$tag" "npm is not installed ($what need node >= 18 and npm)"
  major="$(node -p 'process.versions.node.split(".")[0]')"
  [[ "$major" -ge 18 ]] || npm_die "$tag" "node $(node --version) is too old (need >= 18)"
}

# npm_ci_pinned TAG WHAT SRC OUT FORCE: npm ci of SRC/package.json + package-lock.json into
# OUT/node_modules, reused while OUT holds an install of the same lock file (FORCE=1 redoes it).
npm_ci_pinned() {
  local tag=$1 what=$2 src=$3 out=$4 force=$5
  if [[ "$force" == 1 ]] || ! cmp -s "$src/package-lock.json" "$out/.installed-lock.json" || [[ ! -d "$out/node_modules" ]]; then
    cp "$src/package.json" "$src/package-lock.json" "$out/"
    rm -f "$out/.installed-lock.json"
    echo "$tag: npm ci in $out" >&2
    if ! (cd "$out" && timeout 600 npm ci --no-audit --no-fund --loglevel=error >"$out/npm.log" 2>&1); then
      cat "$out/npm.log" >&2
      npm_die "$tag" "npm ci failed (see above and $out/npm.log): $what need the npm registry" \
        "($(npm config get registry 2>/dev/null)); they do not pass without it"
    fi
    cp "$src/package-lock.json" "$out/.installed-lock.json"
  fi
}
