#!/usr/bin/env bash
# Fuzzes a parser of untrusted model files with libFuzzer + AddressSanitizer + UndefinedBehaviorSanitizer.
#   scripts/run_fuzz.sh [seconds, default 60] [target, default safetensors]
# Targets (tests/fuzz/fuzz_<target>.cpp; each states its input format and invariants):
#   safetensors    the safetensors header parser
#   config         config.json + generation_config.json
#   tokenizer      tokenizer.json loading, then encode/decode (+ tokenizer_config / generation_config)
#   chat_template  chat-template loading (tokenizer_config.json, chat_template.jinja) and rendering
#   request_framing  mk-server's framing of the HTTP requests it reads (host/server/request_framing.h)
# Builds build-fuzz/fuzz_<target> straight from the sources it needs (no CMake: the sanitizer and
# fuzzer flags must apply to these files only), seeds a scratch corpus from the committed seeds
# (tests/fuzz/corpus for safetensors, tests/fuzz/corpus_<target> for the others) and runs. Exits
# non-zero on any crash, sanitizer report, uncaught exception, violated invariant, timeout or memory
# blow-up; the input that caused it is left in build-fuzz/ as <target>-crash-*, -timeout-* or -oom-*.
# The last lines are libFuzzer's final stats (executions) and "DONE cov: ... ft: ..." (coverage).
set -euo pipefail

seconds="${1:-60}"
target="${2:-safetensors}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$repo/build-fuzz"

# clang with compiler-rt for -fsanitize=fuzzer, plus the libraries the parsers use. Installed when
# missing and we are root on a Debian-like system; otherwise the missing packages are named.
ensure_prerequisites() {
  local missing=()
  for pkg in clang libclang-rt-14-dev libfmt-dev nlohmann-json3-dev libpcre2-dev libicu-dev; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    echo "run_fuzz.sh: missing packages: ${missing[*]} (install them, or run as root on Debian 12)" >&2
    exit 1
  fi
  echo "run_fuzz.sh: installing ${missing[*]}"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

pick_compiler() {
  # libclang-rt-14-dev provides the fuzzer runtime for clang 14; prefer that exact compiler.
  for cxx in clang++-14 clang++; do
    if command -v "$cxx" >/dev/null; then
      echo "$cxx"
      return
    fi
  done
  echo "run_fuzz.sh: no clang++ found" >&2
  exit 1
}

# Per target: the sources beside the fuzz target, the libraries, the seed corpus.
# -max_len: inputs of a few KiB reach every branch of the small formats; tokenizer.json needs a
# vocabulary of 256 byte tokens (about 2.5 KiB) before anything past the loader runs.
libs=(-lfmt)
case "$target" in
  safetensors)
    sources=(runtime/safetensors.cpp runtime/dtype.cpp)
    seeds="$repo/tests/fuzz/corpus" corpus="$out/corpus" max_len=8192 ;;
  config)
    sources=(runtime/model_config.cpp runtime/weight_layout.cpp runtime/quantize.cpp runtime/schedule.cpp runtime/step_recipe.cpp runtime/recipe_llama.cpp runtime/recipe_gemma3.cpp runtime/rope.cpp runtime/dtype.cpp)
    seeds="$repo/tests/fuzz/corpus_config" corpus="$out/corpus_config" max_len=4096 ;;
  tokenizer)
    sources=(runtime/tokenizer.cpp)
    libs+=($(pkg-config --libs libpcre2-8 icu-uc))
    seeds="$repo/tests/fuzz/corpus_tokenizer" corpus="$out/corpus_tokenizer" max_len=16384 ;;
  chat_template)
    sources=(runtime/chat_template.cpp)
    seeds="$repo/tests/fuzz/corpus_chat_template" corpus="$out/corpus_chat_template" max_len=8192 ;;
  request_framing)
    sources=(host/server/request_framing.cpp)
    seeds="$repo/tests/fuzz/corpus_request_framing" corpus="$out/corpus_request_framing" max_len=4096 ;;
  *)
    echo "run_fuzz.sh: unknown target '$target' (safetensors, config, tokenizer, chat_template, request_framing)" >&2
    exit 2 ;;
esac

ensure_prerequisites
cxx="$(pick_compiler)"
mkdir -p "$out"
binary="$out/fuzz_$target"

echo "run_fuzz.sh: building $binary with $cxx"
# undefined includes the alignment check (named here for the record: a tensor may sit at any offset).
"$cxx" -std=c++20 -g -O1 -fno-omit-frame-pointer \
  -fsanitize=fuzzer,address,undefined,alignment -fno-sanitize-recover=all \
  -I"$repo" \
  "$repo/tests/fuzz/fuzz_$target.cpp" \
  "${sources[@]/#/$repo/}" \
  "${libs[@]}" -o "$binary"

# New inputs go to a scratch corpus so that the checked-in seeds stay small and reviewed.
mkdir -p "$corpus"
cp -n "$seeds"/* "$corpus"/ 2>/dev/null || true

dict=()
[ -f "$repo/tests/fuzz/$target.dict" ] && dict=(-dict="$repo/tests/fuzz/$target.dict")
echo "run_fuzz.sh: fuzzing $target for ${seconds}s"
# -timeout: a single input taking 10 s means a quadratic (or worse) path.
# -rss_limit_mb / -malloc_limit_mb: an input that makes a parser allocate more than 2 GiB at once is a
# finding (sizes must be bounded before allocating).
"$binary" \
  -max_total_time="$seconds" -timeout=10 -max_len="$max_len" -rss_limit_mb=2560 -malloc_limit_mb=2048 \
  -print_final_stats=1 "${dict[@]}" -artifact_prefix="$out/$target-" \
  "$corpus"
echo "run_fuzz.sh: no crashes in ${seconds}s ($target)"
