#!/usr/bin/env bash
# Packs what scripts/server_gpu_check.sh needs on a GPU machine that has no node, no package registry
# and only a base system: run here (no GPU needed), then carry BUNDLE_DIR.
#
#   scripts/server_gpu_bundle.sh BUNDLE_DIR [BUILD_DIR]     (BUNDLE_DIR e.g. .carry/server-gpu: ignored by git)
#
#   BUNDLE_DIR/node.xz          this machine's node binary, xz-compressed (~24 MB; it needs only glibc and
#                               libstdc++ there)
#   BUNDLE_DIR/clients.tar.xz   tests/server/*.mjs with node_modules (the pinned openai client and the
#                               Hugging Face tokenizer and template renderer: scripts/server_test_setup.sh)
#   with BUILD_DIR (a -DMK_GPU=nvidia build with mk-server, mk-run, mk-bench and mk-tiny-chat-model built):
#   BUNDLE_DIR/build/...        those four binaries, laid out as in a build directory
#   BUNDLE_DIR/libs.tar.xz      the shared libraries they link beyond glibc and libstdc++ (PCRE2 and ICU,
#                               as mk-chat), which a bare machine may lack; server_gpu_check.sh puts them on
#                               LD_LIBRARY_PATH
set -euo pipefail
if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: $0 BUNDLE_DIR [BUILD_DIR]" >&2
  exit 2
fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mkdir -p "$1"
bundle="$(cd "$1" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
bash "$root/scripts/server_test_setup.sh" "$work/clients"
tar -C "$work" -cf - clients | xz -T0 -6 >"$bundle/clients.tar.xz"
xz -T0 -6 -c "$(readlink -f "$(command -v node)")" >"$bundle/node.xz"

if [[ $# -eq 2 ]]; then
  build="$(cd "$2" && pwd)"
  tools=(host/server/mk-server host/tools/mk-run bench/mk-bench tests/mk-tiny-chat-model)
  mkdir -p "$work/lib"
  for t in "${tools[@]}"; do
    [[ -x "$build/$t" ]] || { echo "server_gpu_bundle: $build/$t is not built" >&2; exit 1; }
    mkdir -p "$bundle/build/$(dirname "$t")"
    cp "$build/$t" "$bundle/build/$t"
    # Libraries beyond the C and C++ runtimes (and the CUDA driver, which the machine has).
    for lib in $(ldd "$build/$t" | awk '$3 ~ /^\// && $3 !~ /\/(libc|libm|libstdc\+\+|libgcc_s|libdl|libpthread|librt|libcuda)\.so/ {print $3}'); do
      cp -L "$lib" "$work/lib/$(basename "$lib")"
    done
  done
  tar -C "$work" -cf - lib | xz -T0 -6 >"$bundle/libs.tar.xz"
  echo "server_gpu_bundle: libraries packed: $(ls "$work/lib" | tr '\n' ' ')" >&2
fi
du -sh "$bundle"
