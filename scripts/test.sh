#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test (unit, conformance, integration).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
./scripts/build.sh
meson test -C build --print-errorlogs --num-processes 2 "$@"
