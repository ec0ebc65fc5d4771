#!/bin/bash
# Runs INSIDE each of two guests of ../shared/vm (test_rdma_api.py starts them), both with
# soft-RoCE: a kernel rds_rdma node that RDMA-writes and -reads memory the shim host registered
# (tests/vm/rdma_api.py: the target on the shim host, the initiator on the node).
# Prints "RESULT <name> <verdict…>" lines.
# Usage: rdma_api.sh BUILD_DIR ROLE(kernel|shim) MY_ADDR PEER_ADDR
set -u
BUILD=$1 ROLE=$2 ME=$3 PEER=$4
MEDIUM=rdma
. "$(dirname "$0")/guest_lib.sh"
guest_setup "$BUILD" "$ROLE" RDS_PRELOAD_LOG_LEVEL=3
vm_barrier ready
if [ "$ROLE" = kernel ]; then
  timeout 120 python3 "$HERE/rdma_api.py" initiator "$ME" 7102 "$PEER" 7101 2>&1
else
  sleep 1  # the node's socket is bound
  $RUN timeout 120 python3 "$HERE/rdma_api.py" target "$ME" 7101 "$PEER" 7102 2>&1
fi
echo "RESULT exit-$ROLE $?"
