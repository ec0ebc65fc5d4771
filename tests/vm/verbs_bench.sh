#!/bin/bash
# Runs INSIDE each of two guests of ../shared/vm (scripts/vm-verbs-bench.sh starts them), both with
# soft-RoCE and no RDS module: perftest's two-sided SEND/RECV figures (ib_send_lat 64 B,
# ib_send_bw 1 MiB), then the shim to shim over RDMA verbs and over TCP (RDS_PRELOAD_VERBS=0) with
# rds-bench's workers: 64 B round trip, 1 MiB one-way stream. vm1 is the client throughout.
# Prints "BENCH <what> <figures>" from vm1.
# Usage: verbs_bench.sh BUILD_DIR ROLE VM(vm1|vm2) MY_ADDR PEER_ADDR SECONDS
set -u
BUILD=$1 VM=$3 ME=$4 PEER=$5 SECS=$6
BENCH="$BUILD/tools/rds-bench"
MEDIUM=rdma
. "$(dirname "$0")/guest_lib.sh"
guest_setup "$BUILD" shim RDS_PRELOAD_LOG_LEVEL=2
vm_barrier ready
# perftest: the server waits for one client; 64 B latency, then 1 MiB bandwidth.
perf() {  # NAME PROGRAM ARGS...
  local name=$1
  shift
  if [ "$VM" = vm2 ]; then
    timeout 120 "$@" >/tmp/$name.out 2>&1 &
    local server=$!
    sleep 1
    vm_barrier "$name"
    wait "$server"
  else
    vm_barrier "$name"
    sleep 1
    timeout 120 "$@" "$PEER" >/tmp/$name.out 2>&1
    cat /tmp/$name.out | tail -4
    echo "BENCH $name $(grep -E '^ *[0-9]+ +[0-9]+ ' /tmp/$name.out | tail -1)"
  fi
}
perf ib_send_lat ib_send_lat -d rxe0 -s 64 -n 3000
perf ib_send_bw ib_send_bw -d rxe0 -s 1048576 -n 300
measure() {  # NAME SERVER_ROLE CLIENT_ROLE SIZE PORT [ENV...]
  local name=$1 srole=$2 crole=$3 size=$4 port=$5
  shift 5
  if [ "$VM" = vm2 ]; then
    $RUN "$@" "$BENCH" --worker="$srole" --addr="$ME" --port="$port" --size="$size" \
      --seconds="$SECS" --cpu=-1 >/tmp/server.out 2>&1 &
    local server=$!
    sleep 1
    vm_barrier "$name"
    vm_barrier "$name-done"
    if [ "$srole" = rds-sink ]; then
      wait "$server"
      echo "BENCH $name $(grep '^result' /tmp/server.out)"
    else
      kill "$server" 2>/dev/null
      wait "$server" 2>/dev/null
    fi
  else
    vm_barrier "$name"
    local out
    out=$($RUN "$@" "$BENCH" --worker="$crole" --addr="$ME" --peer="$PEER" --port="$port" \
          --size="$size" --seconds="$SECS" --cpu=-1 2>&1)
    [ "$crole" = rds-ping ] && echo "BENCH $name $(echo "$out" | grep '^result')"
    vm_barrier "$name-done"
  fi
}
for medium in verbs tcp; do
  verbs=$([ $medium = verbs ] && echo 1 || echo 0)
  base=$([ $medium = verbs ] && echo 4000 || echo 5000)
  # A first exchange sets up the connection.
  measure "warmup-$medium" rds-echo rds-ping 64 $base RDS_PRELOAD_VERBS=$verbs
  measure "rtt-$medium" rds-echo rds-ping 64 $((base + 100)) RDS_PRELOAD_VERBS=$verbs
  measure "stream-$medium" rds-sink rds-source 1048576 $((base + 200)) RDS_PRELOAD_VERBS=$verbs
done
vm_barrier done
exit 0
