#!/usr/bin/env bash
# Fuzzes the safetensors header parser with libFuzzer + AddressSanitizer + UndefinedBehaviorSanitizer.
#   scripts/run_fuzz.sh [seconds, default 60]
# Builds build-fuzz/fuzz_safetensors straight from the sources it needs (no CMake: the sanitizer and
# fuzzer flags must apply to these files only), seeds a scratch corpus from tests/fuzz/corpus and runs.
# Exits non-zero on any crash, sanitizer report, uncaught exception or timeout; the input that caused
# it is left in build-fuzz/ as crash-*, timeout-* or oom-*.
set -euo pipefail

seconds="${1:-60}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$repo/build-fuzz"

# clang with compiler-rt for -fsanitize=fuzzer, plus the libraries the parser uses. Installed when
# missing and we are root on a Debian-like system; otherwise the missing packages are named.
ensure_prerequisites() {
  local missing=()
  for pkg in clang libclang-rt-14-dev libfmt-dev nlohmann-json3-dev; do
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

ensure_prerequisites
cxx="$(pick_compiler)"
mkdir -p "$out"

echo "run_fuzz.sh: building $out/fuzz_safetensors with $cxx"
"$cxx" -std=c++20 -g -O1 -fno-omit-frame-pointer \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  -I"$repo" \
  "$repo/tests/fuzz/fuzz_safetensors.cpp" \
  "$repo/runtime/safetensors.cpp" \
  "$repo/runtime/dtype.cpp" \
  -lfmt -o "$out/fuzz_safetensors"

# New inputs go to a scratch corpus so that the checked-in seeds stay small and reviewed.
corpus="$out/corpus"
mkdir -p "$corpus"
cp -n "$repo"/tests/fuzz/corpus/* "$corpus"/ 2>/dev/null || true

echo "run_fuzz.sh: fuzzing for ${seconds}s"
# -timeout: a single input taking 10 s means a quadratic (or worse) path in the parser.
# -max_len: headers of a few KiB reach every branch; longer inputs only slow the search.
"$out/fuzz_safetensors" \
  -max_total_time="$seconds" -timeout=10 -max_len=8192 -print_final_stats=1 \
  -dict="$repo/tests/fuzz/safetensors.dict" -artifact_prefix="$out/" \
  "$corpus"
echo "run_fuzz.sh: no crashes in ${seconds}s"
