#!/bin/bash
# kernel_relay.sh over RDMA (test_verbs_interop.py): soft-RoCE on both guests, a kernel rds_rdma
# node; three shim processes share the node's one RDMA connection and its owner is killed with
# kill -9 mid-stream: the survivor takes the connection over (a queue pair cannot move: it
# connects again) and every message the others sent arrives once, in order.
MEDIUM=rdma exec "$(cd "$(dirname "$0")" && pwd)/kernel_relay.sh" "$@"
