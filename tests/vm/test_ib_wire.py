#!/usr/bin/env python3
"""The RDS-over-RDMA wire against kernel rds_rdma (issue 17, first step): two guests of
../shared/vm with soft-RoCE (rxe0 on eth0); one loads rds_rdma, the other runs
tests/vm/ib_ping_probe — rdma-core opened at run time (transports/verbs/verbs_api.h) and the
wire of transports/verbs/ib_wire.h, without the engine. The probe connects through the RDMA CM
(port 18634, 32-byte private data, protocol 3.1), sends 20 pings with checksummed headers and
must get 20 pongs; the node's congestion map (8192 bytes, two fragments) must reassemble and the
node must answer protocol 3.1. Then the node connects to the probe (its request checked and
answered) and sends messages of 0 B to 1 MiB around the 4 KiB fragment size, which must arrive
whole and in order. Then the verbs link itself (transports/verbs/verbs_link.h, in an event loop
without the engine: tests/vm/verbs_link_probe) sends 0 B to 1 MiB and a burst of 200 small
messages, queued at once, to the node's echo server: every echo must come back whole and in
order, and the node's h_ack must reach the last message. Last, pings over IPv6 (ULA addresses;
port 16385 and the 56-byte private data) (tests/vm/ib_wire.sh).

Skips (exit 77) as test_kernel_parity.py does. Expected run time: ~1 min (emulated CPU).
"""

import os
import re

from vmlib import HERE, Checks, run_guests


def main():
    out = run_guests(os.path.join(HERE, "ib_wire.sh"), "vm1", 420)
    results = dict(re.findall(r"RESULT (\S+) ?(.*)", out))
    checks = Checks("ib wire")
    check = checks.check
    check("setup" not in results, f"soft-RoCE and rds_rdma came up: {results.get('setup', 'ok')}")
    check(results.get("ping", "").strip() == "ok",
          "20 pings through the RDMA CM connection, each answered by the kernel's pong")
    check(results.get("ping-acked", "").strip() == "20",
          f"the node acknowledged (h_ack) through our last ping: {results.get('ping-acked')}")
    check(results.get("map", "").strip() == "ok",
          "the kernel's congestion map arrived in two fragments and reassembled")
    check(results.get("version", "").strip() == "3.1",
          f"the kernel answered protocol 3.1: {results.get('version')}")
    check(results.get("accept", "").strip() == "ok",
          "the node connected to us (its request answered) and its messages of 0 B to 1 MiB "
          "arrived whole, in order, fragments reassembled")
    check(results.get("request-version", "").strip() == "3.1",
          f"the node proposed protocol 3.1: {results.get('request-version')}")
    check(results.get("link", "").strip() == "ok",
          "the verbs link: 0 B to 1 MiB and a burst of 200, queued at once, all echoed by the "
          "node, which acknowledged the last (h_ack)")
    check(results.get("ping6", "").strip() == "ok",
          "over IPv6 (port 16385, 56-byte private data) pings are answered too")
    check(results.get("transport-connect", "").strip() == "ok",
          "the verbs transport connected to the node (address, route, REQ with private data) "
          "and 60 messages of 0 B to 64 KiB were echoed in order and acknowledged")
    check(results.get("transport-accept", "").strip() == "ok",
          "the verbs transport served the kernel's listeners; the node connected and its "
          "client's messages of 0 B to 64 KiB were echoed back in order")
    check(results.get("shim-shim", "").strip() == "ok",
          "shim to shim over the verbs transport (IPv4): 60 messages echoed and acknowledged")
    check(results.get("shim-shim6", "").strip() == "ok",
          "shim to shim over the verbs transport (IPv6): 30 messages echoed and acknowledged")
    checks.done()


if __name__ == "__main__":
    main()
