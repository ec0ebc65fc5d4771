#!/bin/bash
# kernel_relay.sh with the node's 8 paths forced (test_kernel_multipath.py): the owner's takeover
# continues every path's sequences.
KERNEL_PATHS=8 exec "$(cd "$(dirname "$0")" && pwd)/kernel_relay.sh" "$@"
