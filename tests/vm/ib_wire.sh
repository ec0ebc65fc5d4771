#!/bin/bash
# Runs INSIDE each of two guests of ../shared/vm (test_ib_wire.py starts them), both with
# soft-RoCE (rxe0 on eth0): a kernel rds_rdma node, and a host without RDS where
# tests/vm/ib_ping_probe (the verbs transport's wire and rdma-core loading, no engine)
# connects to the node through the RDMA CM and exchanges pings and pongs.
# Prints "RESULT <name> <verdict>" lines.
# Usage: ib_wire.sh BUILD_DIR ROLE(kernel|shim) MY_ADDR PEER_ADDR
set -u
BUILD=$1 ROLE=$2 ME=$3 PEER=$4
modprobe rdma_rxe && modprobe ib_uverbs && modprobe rdma_ucm || { echo "RESULT setup FAIL modprobe"; exit 1; }
rdma link add rxe0 type rxe netdev eth0 || { echo "RESULT setup FAIL rdma link"; exit 1; }
if [ "$ROLE" = kernel ]; then
  modprobe rds_rdma || { echo "RESULT setup FAIL rds_rdma"; exit 1; }
fi
vm_barrier ready
if [ "$ROLE" = shim ]; then
  out=$(timeout 60 "$BUILD/tests/ib_ping_probe" "$ME" "$PEER" 20 2>&1)
  echo "$out"
  echo "RESULT ping $(echo "$out" | grep -E '^(ok|FAIL)' | head -1 | cut -d' ' -f1)"
  echo "RESULT map $(echo "$out" | grep -q 'congestion map: 8192 bytes' && echo ok || echo missing)"
  echo "RESULT version $(echo "$out" | sed -n 's/^established: protocol \([0-9.]*\),.*/\1/p')"
fi
vm_barrier done
if [ "$ROLE" = kernel ]; then
  echo "--- kernel RDS/IB connections"
  dmesg | grep -i rds | tail -5
fi
exit 0
