#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang in ./build-fuzz and runs each for a
# bounded time, starting from its committed seed corpus (tests/fuzz/corpus/<target>). Fails on
# any crash, leak, timeout, sanitizer report (ASan+UBSan) or broken invariant; the input that
# did it is saved as build-fuzz/fuzz-out/<target>-crash-* (or -leak-, -timeout-, -oom-).
#
#   RDS_FUZZ_SECONDS  total fuzzing time in seconds, shared equally by the targets (default 60);
#                     0 only replays the seed corpus
#   RDS_FUZZ_TARGETS  which targets (default "wire reassembler control ib_fragments")
#   RDS_FUZZ_SEED     libFuzzer -seed (default: random; every run prints the seed it used)
#
# Reproduce a finding:  build-fuzz/tests/fuzz/fuzz_<target> FILE
# Add it to the corpus (it is then replayed by every build's `meson test --suite fuzz`):
#   cp FILE tests/fuzz/corpus/<target>/
#
# Why a separate build directory: g++ (the project's compiler) has no libFuzzer, so the targets
# are built by a meson build directory configured with clang and -Dfuzz=true (see
# tests/fuzz/meson.build); only the `fuzzers` alias is built there.
set -euo pipefail
cd "$(dirname "$0")/.."

total="${RDS_FUZZ_SECONDS:-60}"
read -r -a targets <<<"${RDS_FUZZ_TARGETS:-wire reassembler control ib_fragments sdp_wire}"
per=$((total / ${#targets[@]}))

python3 tests/fuzz/make_corpus.py --check
[ -f build-fuzz/build.ninja ] ||
  CC=clang CXX=clang++ meson setup build-fuzz -Dfuzz=true >/dev/null
ninja -C build-fuzz fuzzers

out=build-fuzz/fuzz-out
rm -rf "$out"
mkdir -p "$out"
args=(-timeout=10 -rss_limit_mb=2048 -print_final_stats=1)
if [ "$per" -gt 0 ]; then
  args+=(-max_total_time="$per")
else
  args+=(-runs=0)
fi
[ -z "${RDS_FUZZ_SEED:-}" ] || args+=(-seed="$RDS_FUZZ_SEED")

failed=()
for t in "${targets[@]}"; do
  mkdir -p "$out/$t"  # new inputs found in this run (the committed corpus is read-only)
  log="$out/$t.log"
  start=$SECONDS
  if build-fuzz/tests/fuzz/fuzz_"$t" "${args[@]}" -artifact_prefix="$out/$t-" \
      "$out/$t" "tests/fuzz/corpus/$t" >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
    seed=$(grep -m1 -o 'Seed: [0-9]*' "$log" || true)
    echo "fuzz $t: OK, ${runs:-?} runs in $((SECONDS - start)) s, ${cov:-cov: ?}, $seed"
  else
    echo "fuzz $t: FAILED (log $log); the end of the log:"
    tail -n 60 "$log"
    ls "$out/$t"-* 2>/dev/null | sed 's/^/  reproducer: /' || true
    failed+=("$t")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzzing found problems in: ${failed[*]}"
  exit 1
fi
