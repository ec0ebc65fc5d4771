#!/bin/bash
# Runs INSIDE each of two guests of ../shared/vm (scripts/vm-kernel-bench.sh starts them): 64 B
# round trip and 64 B one-way rate between the guests with rds-bench's workers, the client on vm1
# then on vm2, for whatever each guest is (kernel: rds_tcp loaded; shim: LD_PRELOAD). Prints
# "BENCH <client-vm> rtt <rds-bench result>" and "BENCH <client-vm> rate <result>" from the
# client's guest.
# Usage: kernel_bench.sh BUILD_DIR ROLE(kernel|shim) VM(vm1|vm2) MY_ADDR PEER_ADDR SECONDS
set -u
BUILD=$1 ROLE=$2 VM=$3 ME=$4 PEER=$5 SECS=$6
BENCH="$BUILD/tools/rds-bench"
. "$(dirname "$0")/guest_lib.sh"
guest_setup "$BUILD" "$ROLE"
measure() {  # NAME CLIENT_VM SERVER_ROLE CLIENT_ROLE PORT
  local name=$1 client=$2 srole=$3 crole=$4 port=$5
  if [ "$VM" != "$client" ]; then
    $RUN "$BENCH" --worker="$srole" --addr="$ME" --port="$port" --size=64 --seconds="$SECS" \
      --cpu=-1 >/tmp/server.out 2>&1 &
    local server=$!
    sleep 1
    vm_barrier "$name-$client"
    vm_barrier "$name-$client-done"
    if [ "$srole" = rds-sink ]; then
      wait "$server"
      echo "BENCH $client $name $(grep '^result' /tmp/server.out)"
    else
      kill "$server" 2>/dev/null
      wait "$server" 2>/dev/null
    fi
  else
    vm_barrier "$name-$client"
    local out
    out=$($RUN "$BENCH" --worker="$crole" --addr="$ME" --peer="$PEER" --port="$port" --size=64 \
          --seconds="$SECS" --cpu=-1 2>&1)
    [ "$crole" = rds-ping ] && echo "BENCH $client $name $(echo "$out" | grep '^result')"
    vm_barrier "$name-$client-done"
  fi
}
# A first exchange sets up the connection (and, under the shim, finds out the peer is a node).
measure warmup vm1 rds-echo rds-ping 4000
for client in vm1 vm2; do
  measure rtt "$client" rds-echo rds-ping 4100
  measure rate "$client" rds-sink rds-source 4200
done
exit 0
