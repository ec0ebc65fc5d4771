#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test (unit, conformance, integration, fuzz-corpus
# replay, and kernel parity in a qemu guest when ../shared/vm is beside the checkout); then the
# robustness runs of issue 3:
#   1. the same suite built with ASan+UBSan (./build-asan), and the unit and conformance tests
#      (the engine thread against application threads) built with TSan (./build-tsan):
#      scripts/test-sanitizers.sh
#   2. each libFuzzer target for a bounded time (./build-fuzz, clang): scripts/fuzz.sh
# Every stage runs even if an earlier one failed; the script fails if any did.
# Arguments go to `meson test` (normal and ASan runs). Environment:
#   RDS_TEST_ASAN=0, RDS_TEST_TSAN=0  skip a sanitizer run
#   RDS_FUZZ_SECONDS                  total fuzzing time (default 60); RDS_FUZZ_SECONDS=0 only
#                                     replays the seed corpus with the libFuzzer binaries
# Expected time on a fresh 2-core machine: about 25 minutes (most of it compiling four builds).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
# The kernel-parity tests boot Debian's kernel under qemu (../shared/vm, beside the checkout);
# its setup installs qemu and fetches the kernel package. Without the harness they skip.
if [ -x ../shared/vm/setup.sh ]; then
  ../shared/vm/setup.sh || echo "warning: ../shared/vm/setup.sh failed; the vm suite will skip"
fi
./scripts/build.sh

failed=()
stage() {
  local name="$1"
  shift
  local start=$SECONDS
  echo "=== $name"
  if "$@"; then
    echo "=== $name: passed ($((SECONDS - start)) s)"
  else
    echo "=== $name: FAILED ($((SECONDS - start)) s)"
    failed+=("$name")
  fi
}

stage "test suite" meson test -C build --print-errorlogs --num-processes 2 "$@"
stage "sanitizers (ASan+UBSan suite, TSan unit + conformance)" ./scripts/test-sanitizers.sh "$@"
stage "fuzzing" ./scripts/fuzz.sh

if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]}"
  exit 1
fi
echo "all stages passed"
