#!/bin/bash
# kernel_faults.sh over RDMA (test_verbs_faults.py): soft-RoCE on both guests, a kernel rds_rdma
# node: both stream to each other through three silences that make the node drop the RDMA
# connection; congestion both ways; a restarted shim process.
MEDIUM=rdma exec "$(cd "$(dirname "$0")" && pwd)/kernel_faults.sh" "$@"
