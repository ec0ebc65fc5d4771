#!/usr/bin/env python3
"""RDS_PRELOAD_TCP_CONGESTION picks the congestion control of the shim's TCP links.

Topology: two network namespaces joined by a veth pair, one rds_peer in each; A runs with
RDS_PRELOAD_TCP_CONGESTION=reno, B with a name the kernel does not know. They exchange messages
both ways (every one checked by rds_peer). Pass: the exchange is complete and correct; A's end of
the link (the TCP connection on the rendezvous port, as `ss -ti` shows it in A's namespace) uses
reno; B's end uses its namespace's default (net.ipv4.tcp_congestion_control) and B logged that
the name was refused.

Needs root and `ip netns` (else skipped, exit 77). Expected run time: ~3-10 s.
"""

import random
import re
import subprocess
import unittest

import itlib

MESSAGES = 5000
PEER_TIMEOUT = 60
RENDEZVOUS_PORT = 16385


def link_algorithms(ns):
    """The congestion control of each established TCP connection on the rendezvous port, and
    ss's output."""
    out = subprocess.run(["ip", "netns", "exec", ns, "ss", "-tin", "state", "established",
                          f"( sport = :{RENDEZVOUS_PORT} or dport = :{RENDEZVOUS_PORT} )"],
                         capture_output=True, text=True, timeout=20, check=True).stdout
    # Each connection: an address line, then an indented line that starts with the algorithm.
    return [m.group(1) for m in re.finditer(r"^\s+([a-z][a-z0-9_]*)\s", out, re.M)], out


class TcpCongestion(unittest.TestCase):
    def test_links_use_the_named_congestion_control(self):
        itlib.require_netns()
        peer = itlib.path_of("RDS_PEER")
        ns_a, ip_a, ns_b, ip_b = itlib.make_two_hosts("cc")
        rundir = {ns_a: itlib.make_tmpdir("cc-hostA"), ns_b: itlib.make_tmpdir("cc-hostB")}
        seed = random.randrange(1, 1 << 30)
        addr = {"A": f"{ip_a}:4001", "B": f"{ip_b}:4001"}
        env = {"A": {"RDS_PRELOAD_TCP_CONGESTION": "reno"},
               "B": {"RDS_PRELOAD_TCP_CONGESTION": "no-such-algorithm",
                     "RDS_PRELOAD_LOG_LEVEL": "2"}}
        peers = []
        for name, ns, other in (("A", ns_a, "B"), ("B", ns_b, "A")):
            argv = [peer, "--bind", addr[name], "--dest", addr[other], "--count", MESSAGES,
                    "--expect", MESSAGES, "--seed", seed, "--io", "threads", "--control",
                    "--timeout", PEER_TIMEOUT]
            peers.append(itlib.Proc(name, argv, rundir[ns], netns=ns, extra_env=env[name]))
        itlib.wait_all(peers, "bound", 20)
        for p in peers:
            p.send("go")
        itlib.wait_all(peers, "done", PEER_TIMEOUT + 10)
        itlib.check_pairs(self, peers, [(addr["A"], addr["B"]), (addr["B"], addr["A"])], MESSAGES)
        # The peers wait for "quit" (--control): their engines and the link are still up.
        on_a, out_a = link_algorithms(ns_a)
        on_b, out_b = link_algorithms(ns_b)

        self.assertTrue(on_a, f"no TCP link on the rendezvous port in A's namespace:\n{out_a}")
        self.assertEqual(set(on_a), {"reno"}, f"A's link ends:\n{out_a}")
        default_b = subprocess.run(
            ["ip", "netns", "exec", ns_b, "cat", "/proc/sys/net/ipv4/tcp_congestion_control"],
            capture_output=True, text=True, timeout=20, check=True).stdout.strip()
        self.assertEqual(set(on_b), {default_b}, f"B's link ends:\n{out_b}")
        itlib.quit_all(self, peers)
        self.assertIn("RDS_PRELOAD_TCP_CONGESTION=no-such-algorithm", peers[1].stderr_text(),
                      "B did not say that its congestion control was refused")


if __name__ == "__main__":
    itlib.run_tests(limit_seconds=PEER_TIMEOUT + 30)
