#!/usr/bin/env bash
# Installs the Debian 12 packages needed to build and test rds-preload.
# clang + libclang-rt-14-dev: the libFuzzer targets (-fsanitize=fuzzer; scripts/fuzz.sh);
# llvm: llvm-symbolizer, for symbolized sanitizer reports. g++'s ASan/UBSan/TSan runtimes
# (libasan8, libubsan1, libtsan2) come with build-essential. gnuplot-nox: rds-bench's PNG plot.
# openjdk-17-jdk-headless: OpenJDK's own SDP support against the shim (tests/integration/test_sdp.py).
set -euo pipefail
packages=(
  build-essential g++ meson ninja-build pkg-config
  libabsl-dev libunwind-dev libibverbs-dev librdmacm-dev
  libgtest-dev libgmock-dev libssl-dev nlohmann-json3-dev
  python3 iproute2 procps
  clang libclang-rt-14-dev llvm
  gnuplot-nox
  openjdk-17-jdk-headless
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
