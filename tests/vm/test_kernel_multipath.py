#!/usr/bin/env python3
"""Multipath with a kernel RDS node (issue 20, point 3): with RDS_PRELOAD_KERNEL_PATHS=8 the shim
and a Linux 6.1 rds_tcp node use 8 TCP connections between their addresses, each sender's messages
on the path its port hashes to. Two guests of ../shared/vm (tests/vm/kernel_multipath.sh): 16
senders at once each way, every message exactly once and in order per sender; the shim's guest
holds 8 connections to the node. Run with the shim on the smaller address (it opens every path,
one at a time, in order) and on the larger (the node opens them, all at once). Then
test_kernel_relay.py's run with 8 paths, the shim on the smaller address: three processes share
the node's 8 connections, the owner is killed mid-stream, and the new owner continues every
path's sequences (on the larger address the 6.1 node reconnects its paths in an order of its own
and 10 duplicates were seen: DESIGN.md §3.5).

The automatic setting uses one path with this node (it does not number paths by source port,
DESIGN.md §3.5); the unit tests (tests/unit/engine_transport_test.cc) play a 7.0+ node that does.

Skips (exit 77) as test_kernel_parity.py does. Expected run time: ~3 min (emulated CPU).
"""

import os
import re

from test_kernel_relay import check_run as check_relay_run
from vmlib import HERE, Checks, run_guests


def main():
    script = os.path.join(HERE, "kernel_multipath.sh")
    checks = Checks("kernel multipath")
    for shim_vm in ("vm1", "vm2"):
        out = run_guests(script, shim_vm, 200)
        order = "smaller" if shim_vm == "vm1" else "larger"
        results = dict(re.findall(r"RESULT (\S+) (.*)", out))
        for phase in ("shim-sends", "node-sends"):
            verdict = results.get(phase, "")
            checks.check(verdict.startswith("16 of 16"),
                         f"shim on the {order} address, {phase}: {verdict or 'no result'}")
        conns = results.get("shim-sends-connections", "").strip()
        checks.check(conns == "8", f"shim on the {order} address: {conns or '?'} TCP connections "
                                   "to the node (8 paths)")
    out = run_guests(os.path.join(HERE, "kernel_relay_8paths.sh"), "vm1", 280)
    check_relay_run(out, "smaller (relay, 8 paths)", checks)
    checks.done()


if __name__ == "__main__":
    main()
