#!/usr/bin/env python3
"""Bad input never crashes the application or the engine.

1. bad_input_probe (one process, 127.0.0.1, private registry): invalid pointers where the kernel
   gives EFAULT (sendto with a bad msg_name or payload, sendmsg with a bad iovec / control /
   msghdr, recvmsg / read into an unmapped buffer with a message queued, setsockopt / getsockopt
   with a bad optval or optlen, getsockname, poll, select, epoll_ctl, ioctl), bogus lengths
   (EINVAL / EMSGSIZE / ENOSPC), unknown options, flags and ioctls (ENOPROTOOPT / EOPNOTSUPP /
   ENOTTY); each errno is checked, and afterwards the queues hold exactly what the kernel would
   leave and messages still flow both ways. A crash is reported as such.
2. Garbage on the TCP rendezvous port (needs root: two private namespaces as two hosts, so port
   16385 cannot collide with anything). Host A runs receiver R (10.R.1.1:4000, the only shim
   process there, so its engine owns A's listener); host B runs senders S1 and S2.
   a. S1 -> R: N messages. R's counters are read (getsockopt RDS_INFO_COUNTERS via rds_peer).
   b. A plain, non-preloaded Python client in host B connects to 10.R.1.1:16385 seven times and
      sends garbage (invalid headers, h_len far above 1 MiB, HTTP, random bytes) and truncated
      records. Every connection must be dropped by the engine within 5 s.
   c. R's counter shim_conn_drop_bad_input must have grown by at least the number of strictly
      invalid connections (5).
   d. The engine keeps serving: R -> S1 over the existing link and S2 -> R over a new connection
      (N messages each) complete, verified message by message and by per-pair SHA-256.

Expected run time: ~3 s (probe) + ~10 s (garbage).
"""

import os
import random
import sys
import time
import unittest

import itlib

MESSAGES = int(os.environ.get("RDS_IT_BAD_INPUT_MESSAGES", "500"))
RENDEZVOUS_PORT = 16385
STRICT_VARIANTS = 5
COUNTER = "shim_conn_drop_bad_input"


def counters(peer):
    """Asks a control-mode rds_peer for its counters: {name: value}."""
    peer.send("counters")
    values = {}
    while True:
        line = peer.expect(("counter ", "counters-end", "counters-error"), 10)
        if line.startswith("counters-error"):
            raise AssertionError(f"{peer.name}: getsockopt(RDS_INFO_COUNTERS) failed: {line}\n"
                                 f"{peer.diag()}")
        if line == "counters-end":
            return values
        _, name, value = line.split()
        values[name] = int(value)


def received(peer):
    peer.send("status")
    line = peer.expect("status", 10)
    return int(line.split()[4])  # status sent <n> received <n> errors <n>


class BadInput(unittest.TestCase):
    def test_probe_bad_pointers_lengths_options(self):
        rundir = itlib.make_tmpdir("badprobe")
        p = itlib.Proc("bad_input_probe", [itlib.path_of("BAD_INPUT_PROBE")], rundir)
        p.close_stdin()
        rc = p.wait(60)
        itlib.log("--- bad_input_probe (exit %s)\n%s" % (
            rc, "\n".join(l for l in p.lines if not l.startswith("try "))))
        if rc is not None and rc < 0:
            tried = [l[4:] for l in p.lines if l.startswith("try ")][-1:]
            self.fail(f"bad_input_probe was killed by signal {-rc} in {tried} (a crash in the "
                      f"shim on bad input)\n{p.diag()}")
        fails = [l for l in p.lines if l.startswith(("FAIL", "fatal"))]
        self.assertEqual(fails, [], "\n  ".join([""] + fails) + "\n" + p.diag())
        self.assertIn("summary failures 0", p.lines, p.diag())
        self.assertEqual(rc, 0, p.diag())

    def test_garbage_on_rendezvous_port(self):
        itlib.require_netns()
        peer = itlib.path_of("RDS_PEER")
        tag = itlib.unique_tag()
        r = random.randrange(1, 255)
        ns_a = itlib.add_netns(f"rdsit{tag}g")
        ns_b = itlib.add_netns(f"rdsit{tag}h")
        ip_a, ip_b = f"10.{r}.1.1", f"10.{r}.1.2"
        itlib.add_veth(ns_a, f"ri{tag}g", f"{ip_a}/24", ns_b, f"ri{tag}h", f"{ip_b}/24")
        itlib.wait_addr_ready(ns_a, ip_a)
        itlib.wait_addr_ready(ns_b, ip_b)
        run_a, run_b = itlib.make_tmpdir("bad-hostA"), itlib.make_tmpdir("bad-hostB")
        seed = random.randrange(1, 1 << 30)
        r_addr, s1_addr, s2_addr = f"{ip_a}:4000", f"{ip_b}:5001", f"{ip_b}:5002"
        common = ["--seed", seed, "--max-size", "65536", "--control", "--timeout", "80"]

        rcv = itlib.Proc("R", [peer, "--bind", r_addr, "--expect", 2 * MESSAGES, "--dest", s1_addr,
                               "--count", MESSAGES] + common, run_a, netns=ns_a)
        s1 = itlib.Proc("S1", [peer, "--bind", s1_addr, "--dest", r_addr, "--count", MESSAGES,
                               "--expect", MESSAGES] + common, run_b, netns=ns_b)
        s2 = itlib.Proc("S2", [peer, "--bind", s2_addr, "--dest", r_addr, "--count", MESSAGES]
                        + common, run_b, netns=ns_b)
        itlib.wait_all([rcv, s1, s2], "bound", 20)

        # a. S1 -> R establishes the TCP link and proves the engine works.
        s1.send("go")
        end = time.monotonic() + 30
        while received(rcv) < MESSAGES:
            self.assertLess(time.monotonic(), end, f"R got {received(rcv)} of {MESSAGES} from S1 "
                            f"in 30 s\n{rcv.diag()}\n{s1.diag()}")
            time.sleep(0.1)
        before = counters(rcv)
        self.assertIn(COUNTER, before, f"R's RDS_INFO_COUNTERS has no {COUNTER}: "
                      f"{sorted(before)}")

        # b. Garbage from a plain client (not preloaded) in host B.
        g = itlib.Proc("garbage", [sys.executable, itlib.script("garbage_client.py"), ip_a,
                                   RENDEZVOUS_PORT], run_b, netns=ns_b, preload=False)
        g.close_stdin()
        g.expect("garbage-done", 90, fail_on=())
        g.wait(10)
        itlib.log("\n".join(g.lines))
        results = [l for l in g.lines if l.startswith("variant ")]
        self.assertEqual(len(results), 7, f"garbage client output:\n{g.diag()}")
        not_dropped = [l for l in results if " dropped " not in l]
        self.assertEqual(not_dropped, [], "connections the engine did not drop:\n  "
                         + "\n  ".join(not_dropped) + f"\n{rcv.diag()}")

        # c. The drops are counted in R's engine.
        deadline = time.monotonic() + 5
        while True:
            after = counters(rcv)
            grown = after.get(COUNTER, 0) - before[COUNTER]
            if grown >= STRICT_VARIANTS or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        itlib.log(f"{COUNTER}: {before[COUNTER]} -> {after.get(COUNTER)}")
        self.assertGreaterEqual(grown, STRICT_VARIANTS,
                                f"{COUNTER} grew by {grown}, want >= {STRICT_VARIANTS} (one per "
                                f"invalid connection)")

        # d. The engine still serves its peers: the existing link and a new one.
        rcv.send("go")
        s2.send("go")
        itlib.wait_all([rcv, s1, s2], "done", 60)
        itlib.check_pairs(self, [rcv, s1, s2],
                          [(s1_addr, r_addr), (s2_addr, r_addr), (r_addr, s1_addr)], MESSAGES)
        itlib.quit_all(self, [rcv, s1, s2])


if __name__ == "__main__":
    itlib.run_tests(limit_seconds=110)
