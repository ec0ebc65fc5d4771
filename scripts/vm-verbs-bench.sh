#!/bin/bash
# RDS over RDMA verbs benchmark (issue 17): two guests of ../shared/vm with soft-RoCE, side by side
# in the same boot: perftest's ib_send_lat (64 B) and ib_send_bw (1 MiB), then the shim to shim
# over verbs and over TCP with rds-bench's workers (64 B round trip, 1 MiB one-way stream).
# Emulated CPUs and soft-RoCE: compare ratios, not absolute figures.
# Usage: scripts/vm-verbs-bench.sh [SECONDS per measurement, default 3]
set -eu
cd "$(dirname "$0")/.."
SECS=${1:-3}
VM=../shared/vm/run.sh
[ -x "$VM" ] || { echo "needs ../shared/vm (the VM harness)"; exit 1; }
BUILD=$PWD/build
out=$("$VM" -c 1 -t 400 \
  --peer "tests/vm/verbs_bench.sh $BUILD shim vm2 10.77.0.2 10.77.0.1 $SECS" -- \
  "tests/vm/verbs_bench.sh $BUILD shim vm1 10.77.0.1 10.77.0.2 $SECS" 2>&1 | grep 'BENCH')
echo "$out"
python3 - "$out" <<'PY'
import re, sys
text = sys.argv[1]
def row(name):
    m = re.search(rf"BENCH {name} (.*)", text)
    return m.group(1) if m else ""
def kv(name, key):
    m = re.search(rf"{key}=([0-9.]+)", row(name))
    return float(m.group(1)) if m else float("nan")
lat = row("ib_send_lat").split()   # bytes iters t_min t_max t_typical t_avg ...
bw = row("ib_send_bw").split()     # bytes iters bw_peak bw_avg msg_rate
ib_rtt = 2 * float(lat[4]) if len(lat) > 4 else float("nan")  # ib_send_lat reports half a round trip
ib_bw = float(bw[3]) if len(bw) > 3 else float("nan")
v_rtt, t_rtt = kv("rtt-verbs", "p50_us"), kv("rtt-tcp", "p50_us")
v_bw, t_bw = kv("stream-verbs", "mb_per_s"), kv("stream-tcp", "mb_per_s")
print(f"{'figure':40} {'value':>12} {'ratio':>8}  target")
print(f"{'ib_send_lat 64 B round trip (2 x typical)':40} {ib_rtt:10.1f}us {'1.00':>8}")
print(f"{'shim over verbs, 64 B round trip p50':40} {v_rtt:10.1f}us {v_rtt / ib_rtt:7.2f}x  <= 1.5x ib_send_lat")
print(f"{'shim over TCP, 64 B round trip p50':40} {t_rtt:10.1f}us {t_rtt / ib_rtt:7.2f}x  verbs faster: {v_rtt < t_rtt}")
print(f"{'ib_send_bw 1 MiB average':40} {ib_bw:8.1f}MB/s {'1.00':>8}")
print(f"{'shim over verbs, 1 MiB stream':40} {v_bw:8.1f}MB/s {v_bw / ib_bw:7.2f}x  >= 0.8x ib_send_bw")
print(f"{'shim over TCP, 1 MiB stream':40} {t_bw:8.1f}MB/s {t_bw / ib_bw:7.2f}x  verbs faster: {v_bw > t_bw}")
PY
