#!/usr/bin/env bash
# Installs the Debian 12 packages needed to build and test rds-preload.
set -euo pipefail
packages=(
  build-essential g++ meson ninja-build pkg-config
  libabsl-dev libunwind-dev libibverbs-dev librdmacm-dev
  libgtest-dev libgmock-dev libssl-dev
  python3 iproute2 procps
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
