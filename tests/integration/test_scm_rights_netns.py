#!/usr/bin/env python3
"""The kernel RDS selftest pattern (kernel-rds.md §D) with sockets passed by SCM_RIGHTS.

Topology: namespaces ns0 (10.R.0.1/24) and ns1 (10.R.0.2/24) joined by a veth pair, and a third
namespace nsP for the parent (only lo). Names and R are unique per run; one registry directory.
For k in 0, 1 a child runs inside ns_k (`ip netns exec ns_k`), creates an unbound RDS socket,
passes it to the parent over an AF_UNIX SEQPACKET socketpair (SCM_RIGHTS) and exits. Only after
both children have exited does the parent (preloaded CPython in nsP) receive the fds, bind
socket 0 to 10.R.0.1:10000 and socket 1 to 10.R.0.2:20000, and run the selftest traffic
(non-blocking sendto, epoll EPOLLRDNORM, recvfrom) -- see scm_rights_helper.py.
Pass: per-pair SHA-256 equal on both sides, for the three kinds of pairs: 0->1 and 1->0 over
TCP between the namespaces, and the self-sends 0->0 and 1->1.

Needs root and `ip netns` (else skipped, exit 77). Expected run time: ~5-15 s.
"""

import os
import random
import socket
import sys
import unittest

import itlib

MESSAGES = int(os.environ.get("RDS_IT_SCM_MESSAGES", "6000"))
PARENT_TIMEOUT = 60


class ScmRightsNetns(unittest.TestCase):
    def test_selftest_pattern_with_passed_sockets(self):
        itlib.require_netns()
        itlib.path_of("RDS_IT_PRELOAD_LIB")
        helper = itlib.script("scm_rights_helper.py")
        tag = itlib.unique_tag()
        r = random.randrange(1, 255)
        ns0 = itlib.add_netns(f"rdsit{tag}0")
        ns1 = itlib.add_netns(f"rdsit{tag}1")
        nsp = itlib.add_netns(f"rdsit{tag}p")
        ip0, ip1 = f"10.{r}.0.1", f"10.{r}.0.2"
        itlib.add_veth(ns0, f"ri{tag}0", f"{ip0}/24", ns1, f"ri{tag}1", f"{ip1}/24")
        itlib.wait_addr_ready(ns0, ip0)
        itlib.wait_addr_ready(ns1, ip1)
        rundir = itlib.make_tmpdir("scm")
        itlib.log(f"namespaces {ns0} {ns1} parent {nsp}; {ip0} <-> {ip1}; {MESSAGES} messages")

        pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET) for _ in range(2)]
        parent_ends = [p[0].fileno() for p in pairs]
        parent = itlib.Proc("parent", [sys.executable, helper, "parent", parent_ends[0],
                                       parent_ends[1], ip0, ip1, MESSAGES],
                            rundir, netns=nsp, pass_fds=parent_ends)
        children = []
        for k, ns in enumerate((ns0, ns1)):
            fd = pairs[k][1].fileno()
            children.append(itlib.Proc(f"child{k}", [sys.executable, helper, "child", fd],
                                       rundir, netns=ns, pass_fds=[fd]))
        for c in children:
            c.close_stdin()
            rc = c.wait(30)
            self.assertIn("sent", c.lines, f"{c.name} did not pass its socket\n{c.diag()}")
            self.assertEqual(rc, 0, f"{c.name} exit status\n{c.diag()}")
        for p in pairs:  # only the parent holds the socketpairs now
            p[0].close()
            p[1].close()

        parent.send("go")
        rc = parent.wait(PARENT_TIMEOUT)
        itlib.log("\n".join(parent.lines))
        self.assertIn("PASS", parent.lines, f"parent did not pass\n{parent.diag()}")
        self.assertEqual(rc, 0, parent.diag())
        # All four kinds of pairs were exercised and matched.
        matched = [l for l in parent.lines if l.startswith("pair ")]
        self.assertEqual(len(matched), 4, f"expected pairs 0->0 0->1 1->0 1->1: {matched}")


if __name__ == "__main__":
    itlib.run_tests(limit_seconds=PARENT_TIMEOUT + 30)
