#!/usr/bin/env bash
# Packs what scripts/server_gpu_check.sh needs on a GPU machine that has neither node nor a package
# registry: run here (no GPU needed), then carry BUNDLE_DIR with the build.
#
#   scripts/server_gpu_bundle.sh BUNDLE_DIR      (e.g. .server-gpu, listed in .git/info/exclude)
#
#   BUNDLE_DIR/node.xz          this machine's node binary, xz-compressed (~24 MB; it needs only glibc and
#                               libstdc++ there)
#   BUNDLE_DIR/clients.tar.xz   tests/server/*.mjs with node_modules (the pinned openai client and the
#                               Hugging Face tokenizer / template renderer: scripts/server_test_setup.sh)
set -euo pipefail
if [[ $# -ne 1 ]]; then
  echo "usage: $0 BUNDLE_DIR" >&2
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
ls -la "$bundle"
