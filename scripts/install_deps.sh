#!/usr/bin/env bash
# Installs the Debian 12 packages monokernel builds with, when missing (needs root or sudo).
#   scripts/install_deps.sh [--amd]     --amd: also the HIP/HSA toolchain for the AMD compile check
set -euo pipefail
packages=(cmake ninja-build g++ pkg-config git libfmt-dev nlohmann-json3-dev libgtest-dev libgmock-dev libcli11-dev
          libpcre2-dev libicu-dev libedit-dev libncurses-dev clang libclang-rt-14-dev ccache nodejs npm curl)
[[ "${1:-}" == "--amd" ]] && packages+=(hipcc libamdhip64-dev libhsa-runtime-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node/npm may come from elsewhere than Debian (e.g. a preinstalled node): accept working binaries.
if command -v node >/dev/null && command -v npm >/dev/null; then
  missing=("${missing[@]/nodejs}"); missing=("${missing[@]/npm}")
fi
read -r -a missing <<< "${missing[*]}"
if ((${#missing[@]} == 0)); then
  echo "install_deps: all packages present"
  exit 0
fi
echo "install_deps: installing ${missing[*]}"
sudo=""
[[ $(id -u) -ne 0 ]] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
