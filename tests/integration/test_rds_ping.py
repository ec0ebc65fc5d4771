#!/usr/bin/env python3
"""rds-ping's exact call sequence (rds-tools.md §4) under the shim, replayed by
rds_tools_replay ping: N sockets, the source address from a connected UDP socket's getsockname,
bind(src:0), optional SIOCRDSSETTOS with a pointer to an unsigned long, sendto(NULL, 0,
dst:port 0), poll(all fds, POLLIN, interval), recvfrom(fd, NULL, 0, MSG_DONTWAIT, &from, &len).

1. Loopback, nobody bound anywhere: every ping is answered from 127.0.0.1 port 0 (the shim's
   port-0 responder, DESIGN.md §3.2; kernel-rds.md C.8), zero bytes, namelen 16; exit 0.
2. -I 127.0.0.1 -n 2 to 127.0.0.2 (another local address): replies come from 127.0.0.2:0.
3. IPv6 loopback (::1): replies from ::1 port 0, namelen 28.
4. -Q on a loopback-bound socket: kernel 6.12 answers SIOCRDSSETTOS with ENOTTY there (the
   loopback transport has no TOS map, kernel-rds.md §A.9), so rds-ping dies ("ERROR: failed to
   set TOS", exit 1) as it would on the kernel.
5. Two hosts (network namespaces A and B over a veth; needs root, else skipped):
   a. B runs no shim process at all: nobody answers; -c 2 ends after 2 pings plus one interval
      with exit 1 (rds-ping's rule: 0 iff at least one reply).
   b. A process in B holds an RDS socket (B's engine): A pings B -> replies from B port 0;
      with -Q 3 as well (a TCP-transport socket: SIOCRDSSETTOS succeeds).
   c. A pings its own non-loopback address with -Q 5: replies from that address port 0.

Expected run time: ~5-10 s.
"""

import os
import random
import re
import sys
import time
import unittest

import itlib

itlib._DEFAULTS.setdefault("RDS_TOOLS_REPLAY", os.path.join(
    itlib.BUILD_DIR, "tests", "integration", "rds_tools_replay"))

STEP_TIMEOUT = 20
TOOL_LINE = re.compile(r"^ +(\d+): (\d+) usec( \(\S+\))?( DUP!)?( ERROR: .*)?$")
REPLY_LINE = re.compile(r"^replay: reply seq (\d+) from (\S+) port (\d+) len (-?\d+) namelen (\d+)$")
SUMMARY = re.compile(r"^replay: sent (\d+) received (\d+)$")

# A process that only holds one bound RDS socket until stdin closes (it makes its netns's
# engine exist, as a running kernel would).
HOLDER = r"""
import socket, sys
s = socket.socket(socket.AF_RDS, socket.SOCK_SEQPACKET, 0)
s.bind((sys.argv[1], int(sys.argv[2])))
print("bound", s.getsockname()[1], flush=True)
sys.stdin.read()
"""


def replay():
    return itlib.path_of("RDS_TOOLS_REPLAY")


class RdsPing(unittest.TestCase):
    def run_ping(self, name, args, rundir, netns=None, timeout=STEP_TIMEOUT):
        p = itlib.Proc(name, [replay(), "ping"] + [str(a) for a in args], rundir, netns=netns)
        p.close_stdin()
        start = time.monotonic()
        rc = p.wait(timeout)
        elapsed = time.monotonic() - start
        itlib.log(f"--- {name} (exit {rc}, {elapsed:.1f} s)\n  " + "\n  ".join(p.lines))
        return p, rc, elapsed

    def check_replies(self, p, rc, count, dst, namelen=16):
        """count pings, count replies, each from dst port 0 with no payload; exit 0."""
        diag = p.diag()
        self.assertEqual(rc, 0, f"rds-ping must exit 0 when replies arrived\n{diag}")
        tool = [TOOL_LINE.match(l) for l in p.lines if l.startswith(" ")]
        self.assertTrue(all(tool), f"unexpected rds-ping output line\n{diag}")
        self.assertEqual([m.group(1) for m in tool], [str(i) for i in range(1, count + 1)],
                         f"one line per reply, in order\n{diag}")
        for m in tool:
            self.assertIsNone(m.group(3), f"reply from another address than {dst}\n{diag}")
            self.assertIsNone(m.group(4), f"duplicate reply\n{diag}")
            self.assertIsNone(m.group(5), f"error reported\n{diag}")
        replies = [REPLY_LINE.match(l) for l in p.lines if l.startswith("replay: reply")]
        self.assertEqual(len(replies), count, diag)
        for m in replies:
            self.assertEqual((m.group(2), int(m.group(3))), (dst, 0),
                             f"a pong must come from the pinged address, port 0\n{diag}")
            self.assertEqual(int(m.group(4)), 0, f"a pong carries no payload\n{diag}")
            self.assertEqual(int(m.group(5)), namelen, f"msg_namelen of the pong\n{diag}")
        summary = [SUMMARY.match(l) for l in p.lines if SUMMARY.match(l)]
        self.assertEqual(len(summary), 1, diag)
        self.assertEqual((int(summary[0].group(1)), int(summary[0].group(2))), (count, count), diag)
        self.assertNotIn("Maybe your kernel", p.stderr_text() + "\n".join(p.lines))

    # ---- one host -------------------------------------------------------------------------------

    def test_loopback_nobody_bound(self):
        rundir = itlib.make_tmpdir("ping-lo")
        p, rc, elapsed = self.run_ping("ping-lo", ["-c", 3, "-i", "0.2", "127.0.0.1"], rundir)
        self.check_replies(p, rc, 3, "127.0.0.1")
        self.assertLess(elapsed, 8, "3 pings 0.2 s apart")

    def test_loopback_explicit_source_two_sockets(self):
        rundir = itlib.make_tmpdir("ping-src")
        p, rc, _ = self.run_ping("ping-src", ["-c", 4, "-i", "100ms", "-n", 2, "-I", "127.0.0.1",
                                              "127.0.0.2"], rundir)
        self.check_replies(p, rc, 4, "127.0.0.2")

    def test_ipv6_loopback(self):
        rundir = itlib.make_tmpdir("ping-v6")
        p, rc, _ = self.run_ping("ping-v6", ["-c", 2, "-i", "0.1", "::1"], rundir)
        self.check_replies(p, rc, 2, "::1", namelen=28)

    def test_tos_on_loopback_socket_dies_like_kernel(self):
        rundir = itlib.make_tmpdir("ping-tos-lo")
        p, rc, _ = self.run_ping("ping-tos-lo", ["-c", 1, "-Q", 1, "127.0.0.1"], rundir)
        err = p.stderr_text()
        self.assertEqual(rc, 1, f"SIOCRDSSETTOS on a loopback-bound socket is ENOTTY on kernel "
                         f"6.12 (§A.9), so rds-ping dies\n{p.diag()}")
        self.assertIn("ERROR: failed to set TOS", err, p.diag())
        self.assertIn("errno: 25 ", err, f"want ENOTTY (25)\n{p.diag()}")

    # ---- two hosts ------------------------------------------------------------------------------

    def test_two_hosts_over_veth(self):
        itlib.require_netns()
        tag = itlib.unique_tag()
        r = random.randrange(1, 255)
        ns_a = itlib.add_netns(f"rdsit{tag}a")
        ns_b = itlib.add_netns(f"rdsit{tag}b")
        ip_a, ip_b = f"10.79.{r}.1", f"10.79.{r}.2"
        itlib.add_veth(ns_a, f"rp{tag}a", f"{ip_a}/24", ns_b, f"rp{tag}b", f"{ip_b}/24")
        itlib.wait_addr_ready(ns_a, ip_a)
        itlib.wait_addr_ready(ns_b, ip_b)
        rundir_a = itlib.make_tmpdir("ping-hostA")
        rundir_b = itlib.make_tmpdir("ping-hostB")

        # a. Nothing runs on B: no reply; -c 2 ends after two pings and one more interval.
        p, rc, elapsed = self.run_ping("ping-nobody", ["-c", 2, "-i", "0.3", ip_b], rundir_a,
                                       netns=ns_a)
        self.assertEqual(rc, 1, f"no reply at all -> exit 1\n{p.diag()}")
        self.assertEqual([l for l in p.lines if SUMMARY.match(l)], ["replay: sent 2 received 0"],
                         p.diag())
        # Two pings and one more interval (~0.6-0.9 s): the exit does not wait the shim's exit
        # flush limit (2 s) for a host whose engine cannot be reached (DESIGN.md §4.1).
        self.assertLess(elapsed, 2.3, f"-c 2 -i 0.3 must end without waiting for B\n{p.diag()}")

        # b. B's engine exists (one process with a bound socket): it answers pings to B.
        holder = itlib.Proc("holder-B", [sys.executable, "-c", HOLDER, ip_b, 4001], rundir_b,
                            netns=ns_b)
        holder.expect("bound", STEP_TIMEOUT)
        p, rc, _ = self.run_ping("ping-B", ["-c", 3, "-i", "0.2", ip_b], rundir_a, netns=ns_a)
        self.check_replies(p, rc, 3, ip_b)
        p, rc, _ = self.run_ping("ping-B-tos", ["-c", 3, "-i", "0.2", "-Q", 3, ip_b], rundir_a,
                                 netns=ns_a)
        self.check_replies(p, rc, 3, ip_b)

        # c. Its own non-loopback address (TCP transport, so -Q is accepted).
        p, rc, _ = self.run_ping("ping-self-tos", ["-c", 2, "-i", "0.1", "-Q", 5, ip_a], rundir_a,
                                 netns=ns_a)
        self.check_replies(p, rc, 2, ip_a)

        holder.close_stdin()
        self.assertEqual(holder.wait(STEP_TIMEOUT), 0, holder.diag())


if __name__ == "__main__":
    itlib.run_tests(limit_seconds=55)
