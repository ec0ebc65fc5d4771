#!/usr/bin/env python3
"""Two processes on one host exchange 100,000 messages in each direction.

Sizes 0 B ... 1 MiB (exact 0 and exact 1048576 included; mostly small, see rds_peer.cc).
Both peers bind 127.0.0.1 port 0 (the shim picks the port). Peer A runs the non-blocking
poll() loop, peer B blocking sender and receiver threads, so both I/O styles are judged.
Pass: each direction delivers exactly 100,000 messages, every message is the expected one in
the expected order (rds_peer verifies each and reports the first lost / duplicated / reordered /
corrupted one), the per-pair SHA-256 over the ordered stream is equal on both sides, and nothing
extra arrives afterwards.

RDS_IT_EXCHANGE_MESSAGES overrides the count (for quick local runs).
"""

import os
import random
import unittest

import itlib

MESSAGES = int(os.environ.get("RDS_IT_EXCHANGE_MESSAGES", "100000"))
PEER_TIMEOUT = 120  # seconds; the expected run time is 5-40 s


class Exchange(unittest.TestCase):
    def setUp(self):
        with open("/proc/sys/net/core/wmem_max") as f:
            wmem_max = int(f.read())
        if wmem_max < 1048576 and os.geteuid() != 0:
            # 1 MiB messages need SO_SNDBUF >= 1 MiB; only root can exceed wmem_max (SO_SNDBUFFORCE).
            self.skipTest(f"net.core.wmem_max={wmem_max} < 1 MiB and not root: "
                          "1 MiB messages cannot be sent (raise wmem_max or run as root)")

    def test_two_processes_both_directions(self):
        rundir = itlib.make_tmpdir("exchange")
        peer = itlib.path_of("RDS_PEER")
        seed = random.randrange(1, 1 << 30)
        itlib.log(f"seed {seed}, {MESSAGES} messages per direction, rundir {rundir}")
        common = ["--count", MESSAGES, "--expect", MESSAGES, "--seed", seed, "--control",
                  "--timeout", PEER_TIMEOUT]
        a = itlib.Proc("A", [peer, "--bind", "127.0.0.1:0", "--io", "poll"] + common, rundir)
        b = itlib.Proc("B", [peer, "--bind", "127.0.0.1:0", "--io", "threads"] + common, rundir)
        addr = {}
        for p in (a, b):
            line = p.expect("bound", 20)
            addr[p.name] = line.split()[1]
        self.assertNotEqual(addr["A"], addr["B"], "two sockets got the same address")
        for name in addr:
            port = int(addr[name].rsplit(":", 1)[1])
            self.assertGreaterEqual(port, 2, f"port 0 bind gave port {port} (0 and 1 are reserved)")
        a.send(f"go {addr['B']}")
        b.send(f"go {addr['A']}")
        itlib.wait_all([a, b], "done", PEER_TIMEOUT + 10)
        itlib.check_pairs(self, [a, b], [(addr["A"], addr["B"]), (addr["B"], addr["A"])], MESSAGES)
        itlib.quit_all(self, [a, b])


if __name__ == "__main__":
    itlib.run_tests(limit_seconds=PEER_TIMEOUT + 30)
