#!/usr/bin/env bash
# Installs dependencies, builds, and runs the main job: two processes exchanging
# RDS messages through the preloaded shim.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
./scripts/build.sh
exec ./build/tools/rds-pingpong --preload ./build/preload/librds_preload.so "$@"
