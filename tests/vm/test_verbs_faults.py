#!/usr/bin/env python3
"""A shim host and a kernel rds_rdma node through faults over RDMA (issue 17, tests 2 and 3):
test_kernel_faults.py's run over soft-RoCE (tests/vm/verbs_faults.sh). Both stream to each other
while the shim's guest goes silent and, in the silence, drops the host's RDMA connection
(RDS_CONN_RESET), three times (the node reconnects and retransmits, among the rest, what the shim
had delivered; a silence alone RC rides out): each side receives the other's stream exactly
once, in order, and the shim counts the duplicates it dropped; congestion maps honoured both ways (ENOBUFS, then sends succeed once drained); a
restarted shim process gets none of what the node retransmits for its predecessor.

Skips (exit 77) as test_kernel_parity.py does. Expected run time: ~5 min (emulated CPU).
"""

import os

from test_kernel_faults import check_run
from vmlib import HERE, Checks, run_guests


def main():
    checks = Checks("verbs faults")
    check_run(run_guests(os.path.join(HERE, "verbs_faults.sh"), "vm1", 500), checks)
    checks.done()


if __name__ == "__main__":
    main()
