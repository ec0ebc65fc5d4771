#!/bin/bash
# Mixed-cluster benchmark (issue 20): 64 B round trip and 64 B one-way rate between two guests of
# ../shared/vm, kernel↔kernel and then shim↔kernel in both directions, in the same guests, side
# by side (emulated CPUs: compare ratios, not absolute figures).
# Usage: scripts/vm-kernel-bench.sh [SECONDS per measurement, default 3]
set -eu
cd "$(dirname "$0")/.."
SECS=${1:-3}
VM=../shared/vm/run.sh
[ -x "$VM" ] || { echo "needs ../shared/vm (the VM harness)"; exit 1; }
BUILD=$PWD/build
run() {  # ROLE_VM1 ROLE_VM2
  "$VM" -c 1 -t 300 \
    --peer "tests/vm/kernel_bench.sh $BUILD $2 vm2 10.77.0.2 10.77.0.1 $SECS" -- \
    "tests/vm/kernel_bench.sh $BUILD $1 vm1 10.77.0.1 10.77.0.2 $SECS" 2>&1 | grep '^\[vm.\] BENCH'
}
echo "== kernel (vm1) <-> kernel (vm2)"; kk=$(run kernel kernel); echo "$kk"
echo "== shim (vm1) <-> kernel (vm2)"; sk=$(run shim kernel); echo "$sk"
python3 - "$kk" "$sk" <<'PY'
import re, sys
def parse(text):
    out = {}
    for client, what, rest in re.findall(r"BENCH (vm\d) (rtt|rate) result (.*)", text):
        kv = dict(x.split("=") for x in rest.split())
        out[(client, what)] = float(kv["p50_us"] if what == "rtt" else kv["msg_per_s"])
    return out
kk, sk = parse(sys.argv[1]), parse(sys.argv[2])
print(f"{'pair (client -> server)':34} {'64 B RTT p50 (us)':>18} {'ratio':>6} {'64 B rate (msg/s)':>18} {'ratio':>6}")
print(f"{'kernel -> kernel (vm1 -> vm2)':34} {kk[('vm1','rtt')]:18.1f} {'1.00':>6} {kk[('vm1','rate')]:18.0f} {'1.00':>6}")
print(f"{'kernel -> kernel (vm2 -> vm1)':34} {kk[('vm2','rtt')]:18.1f} {'1.00':>6} {kk[('vm2','rate')]:18.0f} {'1.00':>6}")
for client, name in (("vm1", "shim -> kernel"), ("vm2", "kernel -> shim")):
    rtt, rate = sk[(client, "rtt")], sk[(client, "rate")]
    print(f"{name + ' (' + client + ' client)':34} {rtt:18.1f} {rtt / kk[(client, 'rtt')]:6.2f} "
          f"{rate:18.0f} {rate / kk[(client, 'rate')]:6.2f}")
PY
