#!/bin/bash
# Runs INSIDE each of two guests of ../shared/vm (test_rdma_api.py starts them), both with
# soft-RoCE: a kernel rds_rdma node that RDMA-writes and -reads memory the shim host registered
# (tests/vm/rdma_api.py: the target on the shim host, the initiator on the node); then the
# node's guest unloads rds_rdma and the same runs shim to shim.
# Prints "RESULT <name> <verdict…>" lines.
# Usage: rdma_api.sh BUILD_DIR ROLE(kernel|shim) MY_ADDR PEER_ADDR
set -u
BUILD=$1 ROLE=$2 ME=$3 PEER=$4
MEDIUM=rdma
. "$(dirname "$0")/guest_lib.sh"
guest_setup "$BUILD" "$ROLE" RDS_PRELOAD_LOG_LEVEL=3
# The preload environment for the node's guest too, once it has unloaded rds_rdma.
RUN_SHIM="env LD_PRELOAD=$BUILD/preload/librds_preload.so RDS_PRELOAD_RUNDIR=/tmp/rds RDS_PRELOAD_LOG_LEVEL=3"
vm_barrier ready
# 1. The node (kernel rds_rdma) against the shim.
if [ "$ROLE" = kernel ]; then
  timeout 120 python3 "$HERE/rdma_api.py" initiator "$ME" 7102 "$PEER" 7101 2>&1
else
  sleep 1  # the node's socket is bound
  $RUN timeout 120 python3 "$HERE/rdma_api.py" target "$ME" 7101 "$PEER" 7102 2>&1
fi
echo "RESULT exit-$ROLE $?"
vm_barrier kernel-done
# 2. Shim to shim: the node's guest unloads rds_rdma and runs the initiator under the shim.
if [ "$ROLE" = kernel ]; then
  modprobe -r rds_rdma || echo "RESULT setup FAIL modprobe -r rds_rdma"
  vm_barrier shim-ready
  RDMA_API_PHASE=shim- $RUN_SHIM timeout 120 python3 "$HERE/rdma_api.py" initiator "$ME" 7202 \
    "$PEER" 7201 2>&1
else
  vm_barrier shim-ready
  sleep 2  # the other's socket is bound and its engine listens
  RDMA_API_PHASE=shim- $RUN timeout 120 python3 "$HERE/rdma_api.py" target "$ME" 7201 "$PEER" \
    7202 2>&1
fi
echo "RESULT shim-exit-$ROLE $?"
