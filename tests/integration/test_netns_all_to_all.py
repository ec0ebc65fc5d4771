#!/usr/bin/env python3
"""Two hosts (network namespaces joined by a veth pair), two processes on each, all-to-all.

Host A = namespace rdsit<tag>a with 10.77.R.1/24, host B = rdsit<tag>b with 10.77.R.2/24
(names and R unique per run). Each host has its own registry directory, as two machines would.
Processes A1, A2 (10.77.R.1 ports 4001, 4002) and B1, B2 (10.77.R.2 ports 4001, 4002) each send
MESSAGES messages (sizes 0 B ... 1 MiB) to each of the three others: same-host pairs go through
the shim's Unix links, cross-host pairs through TCP (rendezvous port 16385) over the veth.
I/O styles are mixed (poll loop / blocking threads).
Pass: all 12 pairs deliver exactly MESSAGES messages in order with equal per-pair SHA-256, no
error or extra message anywhere; large payloads crossed hosts by reference to their pages
(shim_tcp_payloads_spliced) and blocking receivers took some straight into their buffers
(shim_recv_direct), per `rdsctl --json` of each host.

Needs root and `ip netns` (else skipped, exit 77). Expected run time: ~10-30 s.
"""

import os
import random
import unittest

import itlib

MESSAGES = int(os.environ.get("RDS_IT_NETNS_MESSAGES", "2000"))
PEER_TIMEOUT = 60


class NetnsAllToAll(unittest.TestCase):
    def test_all_to_all_over_two_hosts(self):
        itlib.require_netns()
        peer = itlib.path_of("RDS_PEER")
        tag = itlib.unique_tag()
        r = random.randrange(1, 255)
        ns_a = itlib.add_netns(f"rdsit{tag}a")
        ns_b = itlib.add_netns(f"rdsit{tag}b")
        ip_a, ip_b = f"10.77.{r}.1", f"10.77.{r}.2"
        itlib.add_veth(ns_a, f"ri{tag}a", f"{ip_a}/24", ns_b, f"ri{tag}b", f"{ip_b}/24")
        itlib.wait_addr_ready(ns_a, ip_a)
        itlib.wait_addr_ready(ns_b, ip_b)
        rundir = {ns_a: itlib.make_tmpdir("a2a-hostA"), ns_b: itlib.make_tmpdir("a2a-hostB")}

        seed = random.randrange(1, 1 << 30)
        itlib.log(f"namespaces {ns_a} {ns_b}, {ip_a} <-> {ip_b}, seed {seed}, {MESSAGES} per pair")
        layout = [("A1", ns_a, f"{ip_a}:4001", "poll"), ("A2", ns_a, f"{ip_a}:4002", "threads"),
                  ("B1", ns_b, f"{ip_b}:4001", "threads"), ("B2", ns_b, f"{ip_b}:4002", "poll")]
        peers = []
        for name, ns, addr, io in layout:
            dests = [a for (_, _, a, _) in layout if a != addr]
            argv = [peer, "--bind", addr, "--count", MESSAGES, "--expect", MESSAGES * len(dests),
                    "--seed", seed, "--io", io, "--control", "--timeout", PEER_TIMEOUT]
            for d in dests:
                argv += ["--dest", d]
            peers.append(itlib.Proc(name, argv, rundir[ns], netns=ns))
        itlib.wait_all(peers, "bound", 20)
        for p in peers:
            p.send("go")
        itlib.wait_all(peers, "done", PEER_TIMEOUT + 10)
        addrs = [a for (_, _, a, _) in layout]
        expected = [(s, d) for s in addrs for d in addrs if s != d]
        itlib.check_pairs(self, peers, expected, MESSAGES)
        totals = {}
        for ns in (ns_a, ns_b):
            counters = itlib.rdsctl_json(self, rundir[ns])["totals"]["counters"]
            for name in ("shim_tcp_payloads_spliced", "shim_recv_direct"):
                totals[name] = totals.get(name, 0) + counters[name]
        itlib.log(f"counters: {totals}")
        self.assertGreater(totals["shim_tcp_payloads_spliced"], 0)
        self.assertGreater(totals["shim_recv_direct"], 0)
        itlib.quit_all(self, peers)


if __name__ == "__main__":
    itlib.run_tests(limit_seconds=PEER_TIMEOUT + 30)
