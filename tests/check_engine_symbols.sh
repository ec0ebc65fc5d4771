#!/usr/bin/env bash
# The engine never reaches a name the shim interposes (DESIGN.md §1): every libc entry point
# listed as global in preload/librds_preload.map would come back into preload/'s wrappers if the
# engine, transport or configuration code called it (a wrapper can re-enter the engine, take its
# locks, or treat the engine's own fds as the application's). They make raw system calls through
# engine/sys.h instead. This lists the undefined symbols of those objects (the rds_core static
# library) and fails if any interposed name is among them.
# Usage: check_engine_symbols.sh LIBRDS_CORE_A VERSION_SCRIPT
set -euo pipefail
lib=$1
map=$2
command -v nm >/dev/null || { echo "nm (binutils) not found"; exit 77; }
interposed=$(sed -n '/global:/,/local:/p' "$map" | sed -e '/global:/d' -e '/local:/d' -e 's|/\*.*\*/||g' |
             tr ';' '\n' | tr -d ' \t' | grep -v '^$' | sort -u)
[ -n "$interposed" ] || { echo "no interposed names read from $map"; exit 1; }
undefined=$(nm -A -u "$lib" | sed -e 's/@.*//' | awk '{print $NF "\t" $1}' | sort -u)
bad=$(join -t $'\t' <(echo "$interposed") <(echo "$undefined") || true)
n=$(echo "$interposed" | wc -l)
if [ -n "$bad" ]; then
  echo "the engine calls names the shim interposes (use engine/sys.h):"
  echo "$bad" | sed 's/^/  /'
  exit 1
fi
echo "ok: none of the $n interposed names is called by $(basename "$lib")"
