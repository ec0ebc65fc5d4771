#!/usr/bin/env python3
"""The shim's engine over RDMA verbs (issue 17): two guests of ../shared/vm with soft-RoCE, one a
kernel rds_rdma node without rds_tcp (so RDS over RDMA or nothing), the other running unmodified
Python programs (tests/vm/rds_echo.py) under the shim, whose engine takes RDMA for an address on
an RDMA device as the kernel does. Both ways (the shim connects; the node connects to the
engine's listener), 0 B to 1 MiB, content and order checked; pings to port 0 each way; two shim
processes with the node at once (one engine holds the connection, the other relays through it);
a daemon's fork and exec sending throughout; then shim to shim, the node having unloaded rds_rdma (tests/vm/verbs_interop.sh). Then
test_kernel_relay.py's run over RDMA: three shim processes share the node's one RDMA connection
and its owner is killed with kill -9 mid-stream; the others' messages arrive once, in order.

Skips (exit 77) as test_kernel_parity.py does. Expected run time: ~7 min (emulated CPU).
"""

import os
import re

from test_kernel_relay import check_run
from vmlib import HERE, Checks, run_guests


def main():
    out = run_guests(os.path.join(HERE, "verbs_interop.sh"), "vm1", 400)
    results = dict(re.findall(r"RESULT (\S+) ?(.*)", out))
    checks = Checks("verbs interop")
    check = checks.check
    check("setup" not in results, f"soft-RoCE and rds_rdma came up: {results.get('setup', 'ok')}")
    check("is on an RDMA device: its connections to other hosts use RDMA verbs" in out,
          "the shim's engine chose RDMA verbs for its address")
    check("relaying through it" in out,
          "with two shim processes at once, one engine relayed through the other's connection")
    for phase, what in (
            ("kernel-server", "the shim connected to the node over RDMA; 0 B to 1 MiB echoed"),
            ("shim-server", "the node connected to the shim engine's listener; 0 B to 1 MiB "
                            "echoed"),
            ("shim-pings-node", "the shim pinged the node's port 0 over RDMA"),
            ("node-pings-shim", "the node pinged the shim's port 0 over RDMA"),
            ("ib-info", "RDS_INFO_IB_CONNECTIONS lists the connection with its ring sizes"),
            ("rdsctl-qp", "rdsctl shows the RDMA path with its queue pair and posted receives"),
            ("relay-a", "two shim processes at once with the node: the first's conversation"),
            ("relay-b", "two shim processes at once with the node: the second's conversation"),
            ("fork-exec", "a daemon's fork and exec: parent, child and exec'd program's 600 "
                          "messages reached the node once, in order"),
            ("relisten", "the exec'd program listens on the RDMA CM port once the parent "
                         "that held it is gone"),
            ("shim-shim", "shim to shim over RDMA: 0 B to 1 MiB echoed")):
        check(results.get(phase, "").strip() == "ok", f"{what}: {results.get(phase)}")
    # kill -9 of the engine that holds the node's RDMA connection, mid-stream
    # (tests/vm/verbs_relay.sh: test_kernel_relay.py's run over RDMA).
    check_run(run_guests(os.path.join(HERE, "verbs_relay.sh"), "vm1", 280), "RDMA", checks)
    checks.done()


if __name__ == "__main__":
    main()
