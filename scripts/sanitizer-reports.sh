#!/usr/bin/env bash
# Run by meson as the last test of a sanitizer build (tests/meson.build): prints every sanitizer
# report written during the run (log_path=PREFIX gives PREFIX.<pid> files), removes them, and
# fails if there was any.
set -euo pipefail
prefix="$1"
shopt -s nullglob
reports=("$prefix".*)
if [ ${#reports[@]} -eq 0 ]; then
  echo "no sanitizer reports"
  exit 0
fi
echo "${#reports[@]} sanitizer report(s):"
for r in "${reports[@]}"; do
  echo "===================== $r"
  cat "$r"
  rm -f "$r"
done
exit 1
