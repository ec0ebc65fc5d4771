#!/bin/bash
# SDP benchmark (issue 18): two guests of ../shared/vm with soft-RoCE, side by side in the same
# boot: rdma-core's rstream over rsockets, over kernel TCP, and over SDP under the shim (plain
# sockets converted by a libsdp rule: SDP over RDMA verbs) — 64 B round trip and 1 MiB transfers.
# Emulated CPUs and soft-RoCE: compare ratios, not absolute figures.
# Usage: scripts/vm-sdp-bench.sh
set -eu
cd "$(dirname "$0")/.."
VM=../shared/vm/run.sh
[ -x "$VM" ] || { echo "needs ../shared/vm (the VM harness)"; exit 1; }
BUILD=$PWD/build
out=$("$VM" -c 1 -t 600 \
  --peer "tests/vm/sdp_bench.sh $BUILD vm2 10.77.0.2 10.77.0.1" -- \
  "tests/vm/sdp_bench.sh $BUILD vm1 10.77.0.1 10.77.0.2" 2>&1 | grep 'BENCH')
echo "$out"
python3 - "$out" <<'PY'
import math, sys
rows = {}
for line in sys.argv[1].splitlines():
    parts = line.split("BENCH ", 1)[-1].split()
    if len(parts) >= 9:  # name, then rstream's: test size xfers iters bytes seconds Gb/s usec/xfer
        rows[parts[0]] = (float(parts[7]), float(parts[8]))
def rtt(how):  # rstream's usec/xfer is half a round trip for one transfer per iteration
    return 2 * rows[f"lat-{how}"][1] if f"lat-{how}" in rows else math.nan
def gbps(how):
    return rows[f"bw-{how}"][0] if f"bw-{how}" in rows else math.nan
print(f"{'rstream':28} {'64 B round trip':>16} {'vs TCP':>7} {'1 MiB Gb/s':>11} {'vs TCP':>7}")
for how, label in (("tcp", "kernel TCP (-T s)"), ("sdp", "SDP under the shim (-T s)"),
                   ("rsocket", "rsockets")):
    print(f"{label:28} {rtt(how):13.1f} us {rtt(how) / rtt('tcp'):6.2f}x "
          f"{gbps(how):11.3f} {gbps(how) / gbps('tcp'):6.2f}x")
PY
