#!/usr/bin/env bash
# The test suite under sanitizers (issue 3, item 5), each in a build directory of its own:
#   ./build-asan  everything built with ASan+UBSan (meson's built-in b_sanitize), and the whole
#                 suite run: unit, conformance, integration, fuzz-corpus replay. How the
#                 instrumented preload library is loaded into the test programs (the ASan
#                 runtime first in LD_PRELOAD), which options apply, and how reports from any
#                 process fail the run: tests/meson.build.
#   ./build-tsan  the unit tests and the conformance suite (the engine's threads against
#                 the application's) built with TSan and run.
# Arguments are passed to the ASan `meson test` run (e.g. --suite conformance).
#   RDS_TEST_ASAN=0 / RDS_TEST_TSAN=0 skip one of them.
#
# By hand:
#   meson setup build-asan -Db_sanitize=address,undefined -Doptimization=1 \
#     -Dcpp_args="-fno-omit-frame-pointer -D_GLIBCXX_ASSERTIONS" -Dc_args=-fno-omit-frame-pointer
#   meson test -C build-asan --print-errorlogs
#   meson setup build-tsan -Db_sanitize=thread
#   ninja -C build-tsan tests/unit/unit_tests && meson test -C build-tsan --no-rebuild --suite unit
set -euo pipefail
cd "$(dirname "$0")/.."

status=0

if [ "${RDS_TEST_ASAN:-1}" != 0 ]; then
  # -O1: faster to build than the default -O2 and still fast to run. -fno-omit-frame-pointer:
  # complete stacks in reports. _GLIBCXX_ASSERTIONS: bounds-checked operator[] of std::array,
  # std::vector and std::span (an access just past a std::array inside an object is undefined
  # behaviour that ASan cannot see).
  [ -f build-asan/build.ninja ] ||
    meson setup build-asan -Db_sanitize=address,undefined -Doptimization=1 \
      -Dcpp_args="-fno-omit-frame-pointer -D_GLIBCXX_ASSERTIONS" \
      -Dc_args=-fno-omit-frame-pointer >/dev/null
  ninja -C build-asan
  rm -f build-asan/sanitizer-report.*
  # The suite's own timeouts are kept: instrumented, it takes about as long as uninstrumented
  # (its time is mostly waiting), and a larger multiplier would only make a failing run longer
  # (a conformance binary killed by a report can leave a SIGSTOPped StoppedPeer child holding
  # meson's pipe, so meson waits for the test's timeout).
  meson test -C build-asan --print-errorlogs --num-processes 2 "$@" || status=1
fi

if [ "${RDS_TEST_TSAN:-1}" != 0 ]; then
  # The engine's concurrency (its thread against application threads: socket state, queues,
  # waiters, the fd table, the request queue) is exercised by the conformance suite, which runs
  # the instrumented preload library under multi-threaded gtest programs; the unit tests cover
  # the codecs. Only those targets are built (the integration helpers are not needed here).
  [ -f build-tsan/build.ninja ] || meson setup build-tsan -Db_sanitize=thread >/dev/null
  mapfile -t tsan_targets < <(meson introspect build-tsan --targets |
    python3 -c 'import json, os, sys
for t in json.load(sys.stdin):
    d = t["defined_in"]
    if t["name"] == "rds_preload" or "/tests/conformance/" in d or "/tests/unit/" in d:
        print(os.path.relpath(t["filename"][0], "build-tsan"))')
  ninja -C build-tsan "${tsan_targets[@]}"
  rm -f build-tsan/sanitizer-report.*
  # The unit binary, then the conformance suite (which ends with 'sanitizer-reports', the
  # collector of every report both runs wrote).
  meson test -C build-tsan --no-rebuild --print-errorlogs unit || status=1
  meson test -C build-tsan --no-rebuild --print-errorlogs --num-processes 2 \
    --suite conformance || status=1
fi

exit $status
