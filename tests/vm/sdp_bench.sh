#!/bin/bash
# Runs INSIDE each of two guests of ../shared/vm (scripts/vm-sdp-bench.sh starts them), both with
# soft-RoCE: rdma-core's rstream between them three ways, in the same boot — over rsockets (its
# own RDMA streams), over kernel TCP (-T s: plain sockets), and over SDP under the shim (the same
# plain sockets converted by a libsdp rule, so SDP over RDMA verbs). 64 B ping-pong and 1 MiB
# transfers each. vm1 is the client throughout. Prints "BENCH <name> <rstream's result row>" from vm1.
# Usage: sdp_bench.sh BUILD_DIR VM(vm1|vm2) MY_ADDR PEER_ADDR
set -u
BUILD=$1 VM=$2 ME=$3 PEER=$4
. "$(dirname "$0")/guest_lib.sh"
sysctl -qw net.core.wmem_max=16777216 net.core.rmem_max=16777216
modprobe rdma_rxe && modprobe ib_uverbs && modprobe rdma_ucm &&
  rdma link add rxe0 type rxe netdev eth0 || echo "BENCH setup FAIL soft-RoCE"
echo "use sdp server rstream *:*
use sdp client rstream *:*" >/tmp/sdp.conf
SHIM="env LD_PRELOAD=$BUILD/preload/librds_preload.so RDS_PRELOAD_RUNDIR=/tmp/rds RDS_PRELOAD_SDP_CONFIG=/tmp/sdp.conf RDS_PRELOAD_LOG_LEVEL=3"
vm_barrier ready
port=7500
run() {  # NAME PREFIX RSTREAM_OPTIONS...: one rstream server (vm2) and client (vm1)
  local name=$1 prefix=$2
  shift 2
  port=$((port + 1))
  if [ "$VM" = vm2 ]; then
    timeout 300 $prefix rstream -b "$ME" -p "$port" "$@" >/tmp/$name.out 2>&1 &
    local server=$!
    sleep 2
    vm_barrier "$name"
    wait "$server"
  else
    vm_barrier "$name"
    sleep 1
    timeout 300 $prefix rstream -s "$PEER" -p "$port" "$@" >/tmp/$name.out 2>&1
    local row
    row=$(grep -E '^custom +[0-9]' /tmp/$name.out | tail -1)
    echo "BENCH $name $row"
    [ -n "$row" ] || tail -6 /tmp/$name.out | sed "s/^/BENCH-LOG $name: /"
  fi
}
for how in ${SDP_BENCH_ONLY:-rsocket tcp sdp}; do
  case $how in
    rsocket) prefix="" opts="" ;;
    tcp) prefix="" opts="-T s" ;;
    sdp) prefix="$SHIM" opts="-T s" ;;
  esac
  run "lat-$how" "$prefix" $opts -S 64 -C 1 -I 1000
  run "bw-$how" "$prefix" $opts -S 1048576 -C 16 -I 4
done
vm_barrier done
exit 0
