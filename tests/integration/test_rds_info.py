#!/usr/bin/env python3
"""rds-info's exact call sequence (rds-tools.md §5) under the shim, replayed by
rds_tools_replay info: one unbound socket; for each source in rds-info's order (I, T, c, k, n,
p, r, s, t) getsockopt(SOL_RDS, RDS_INFO_x, buf, &len) starting from buf=NULL len=0 and then
reusing the previous buffer and length, realloc to the returned length on ENOSPC and retry,
items read at stride `each` (the return value) copying min(each, sizeof(local struct)).
The shim answers host-wide (every shim process of the network namespace, DESIGN.md / info.h),
so the information shown is the other processes'.

1. One host. Holder processes (CPython socket.AF_RDS under the shim): R bound to
   127.0.0.1:PR never reads; S bound to 127.0.0.1:PS sends 5 messages of 100..104 bytes to R.
   `info` (all sources), with every getsockopt traced:
   * exit 0; the unsupported sources (IB 10008, UEK paths 10020) print rds-info's error line
     "Unable to get statistics to process the "<desc>" info request: Protocol not available"
     and the run continues with every later source, in rds-info's order;
   * sockets: PR and PS with their addresses and buffer sizes; counters: send_queued and
     recv_queued >= 5 (counted in S and R, not in rds-info's process), none decreasing later;
     connections: 127.0.0.1 -> 127.0.0.1 connected; receive queue: exactly the 5 messages
     (R's port, S's port, sizes 100..104, increasing sequence numbers);
   * the length negotiation of kernel-rds.md §A.8: a call that is short gets ENOSPC and the
     needed length, the retry with that length succeeds, returns the item size (counters 40,
     sockets 28, connections 42, messages 26, TCP sockets 41 -- upstream sizes) and a total
     that is a multiple of it.
   Then `info -a -k -r` (RDS6_* variants, v4-mapped printed as IPv4), `info -k` (one source only),
   and after R drained its queue `info -r` shows an empty receive queue.
   Separately: the kernel has ONE loopback connection 127.0.0.1 -> 127.0.0.1 for both sockets,
   with NextTX = NextRX = 6 after 5 messages (test_loopback_connection_is_one_row).
2. Two hosts (namespaces A, B over a veth; needs root, else skipped): a sender in A, a
   non-reading receiver in B. In A: the TCP connection (10007) to B's rendezvous port 16385 or
   from it, the connection A -> B, A's socket but not B's; in B: the 3 queued messages from A.

Expected run time: ~3-5 s.
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
ORDER = ["TCP Connections:", "Counters:", "RDS Sockets:", "RDS Connections:",
         "Receive Message Queue:", "Send Message Queue:", "Retransmit Message Queue:"]
ITEM_SIZES = {10000: 40, 10001: 42, 10003: 26, 10004: 26, 10005: 26, 10006: 28, 10007: 41,
              10011: 65, 10012: 50, 10013: 50, 10014: 50, 10015: 52, 10016: 64}
TRACE = re.compile(r"^trace getsockopt opt (\d+) buf (NULL|set) len_in (\d+) = (-?\d+) errno (\S+) "
                   r"len_out (\d+)$")
ENOPROTOOPT_TEXT = "Protocol not available"

# One RDS socket driven by stdin: "send ADDR PORT N SIZE0" sends N messages of SIZE0, SIZE0+1, ...
# bytes; "drain" receives until EAGAIN. Prints "bound <port>", "sent <n>", "drained <n>".
HOLDER = r"""
import errno, socket, sys
s = socket.socket(socket.AF_RDS, socket.SOCK_SEQPACKET, 0)
s.bind((sys.argv[1], int(sys.argv[2])))
print("bound", s.getsockname()[1], flush=True)
for line in sys.stdin:
    cmd = line.split()
    if not cmd:
        continue
    if cmd[0] == "send":
        addr, port, n, size = cmd[1], int(cmd[2]), int(cmd[3]), int(cmd[4])
        for i in range(n):
            s.sendto(b"m" * (size + i), (addr, port))
        print("sent", n, flush=True)
    elif cmd[0] == "drain":
        n = 0
        while True:
            try:
                s.recv(65536, socket.MSG_DONTWAIT)
                n += 1
            except BlockingIOError:
                break
        print("drained", n, flush=True)
    elif cmd[0] == "quit":
        break
"""


def replay():
    return itlib.path_of("RDS_TOOLS_REPLAY")


def sections(lines):
    """{title: [row, ...]} and the order of titles, from rds-info's output."""
    out, order, cur = {}, [], None
    for line in lines:
        if line.endswith(":") and not line.startswith(" "):
            cur = line
            order.append(cur)
            out[cur] = []
        elif cur and line.strip():
            out[cur].append(line.split())
    # drop each section's column header
    return {k: v[1:] for k, v in out.items()}, order


class RdsInfo(unittest.TestCase):
    def holder(self, name, addr, port, rundir, netns=None):
        p = itlib.Proc(name, [sys.executable, "-c", HOLDER, addr, port], rundir, netns=netns)
        port = int(p.expect("bound", STEP_TIMEOUT).split()[1])
        return p, port

    def info(self, name, args, rundir, netns=None):
        p = itlib.Proc(name, [replay(), "info"] + args, rundir, netns=netns,
                       extra_env={"RDS_REPLAY_TRACE": "1"})
        p.close_stdin()
        rc = p.wait(STEP_TIMEOUT)
        err = p.stderr_text(100000)
        itlib.log(f"--- {name} {' '.join(args)} (exit {rc})\n  " + "\n  ".join(p.lines) +
                  "\n  stderr:\n  " + err.replace("\n", "\n  "))
        self.assertEqual(rc, 0, f"rds-info exits 0\n{p.diag()}")
        secs, order = sections(p.lines)
        traces = [TRACE.match(l) for l in err.splitlines() if l.startswith("trace ")]
        self.assertTrue(all(traces), err)
        return p, secs, order, traces, err

    def wait_recv_queue(self, rundir, port, count, netns=None):
        """Polls `info -r` until `count` messages for `port` are queued (delivery is async)."""
        end = time.monotonic() + 10
        while True:
            _, secs, _, _, _ = self.info("info-r-wait", ["-r"], rundir, netns)
            rows = [r for r in secs.get("Receive Message Queue:", []) if int(r[1]) == port]
            if len(rows) >= count or time.monotonic() > end:
                return rows
            time.sleep(0.2)

    def check_negotiation(self, traces, diag):
        prev_len = 0
        first = True
        for m in traces:
            opt, buf, len_in, ret, err, len_out = (int(m.group(1)), m.group(2), int(m.group(3)),
                                                   int(m.group(4)), m.group(5), int(m.group(6)))
            if first:
                self.assertEqual((buf, len_in), ("NULL", 0), f"rds-info starts with NULL/0\n{diag}")
                first = False
            else:
                self.assertEqual(len_in, prev_len, f"the length is reused\n{diag}")
            if ret >= 0:
                self.assertEqual(ret, ITEM_SIZES.get(opt, ret), f"item size of {opt}\n{diag}")
                self.assertEqual(len_out % ret, 0, f"total of {opt} not a multiple of {ret}\n{diag}")
                self.assertLessEqual(len_out, len_in, f"{opt}: success with total > len\n{diag}")
                prev_len = len_out
            elif err == "ENOSPC":
                self.assertGreater(len_out, len_in, f"ENOSPC must ask for more\n{diag}")
                prev_len = len_out
            else:
                self.assertEqual(err, "ENOPROTOOPT", diag)
                self.assertEqual(len_out, len_in, f"a failed call leaves len\n{diag}")
                prev_len = len_out
        retried = [i for i in range(len(traces) - 1)
                   if traces[i].group(5) == "ENOSPC" and int(traces[i + 1].group(4)) > 0 and
                   traces[i + 1].group(1) == traces[i].group(1)]
        self.assertTrue(retried, f"no ENOSPC -> realloc -> success sequence was seen\n{diag}")

    def test_one_host(self):
        rundir = itlib.make_tmpdir("info-local")
        base = random.randrange(20000, 60000)
        r, pr = self.holder("holder-R", "127.0.0.1", base, rundir)
        s, ps = self.holder("holder-S", "127.0.0.1", base + 1, rundir)
        s.send(f"send 127.0.0.1 {pr} 5 100")
        s.expect("sent", STEP_TIMEOUT)
        rows = self.wait_recv_queue(rundir, pr, 5)
        self.assertEqual(len(rows), 5, f"5 messages must be queued at R: {rows}")

        p, secs, order, traces, err = self.info("info-all", [], rundir)
        diag = p.diag() + "\n" + err
        # Unsupported sources: rds-info's error line, and the run continues.
        for desc in ("IB transport connections", "connection paths"):
            self.assertIn(f'rds-info: Unable to get statistics to process the "{desc}" info '
                          f'request: {ENOPROTOOPT_TEXT}', err, diag)
        self.assertEqual(order, ORDER, f"sources printed in rds-info's order\n{diag}")
        self.assertEqual([int(t.group(1)) for t in traces if t.group(5) != "ENOSPC"],
                         [10008, 10007, 10000, 10006, 10001, 10020, 10005, 10003, 10004], diag)
        self.check_negotiation(traces, diag)

        socks = {(row[0], int(row[1])): row for row in secs["RDS Sockets:"]}
        for port in (pr, ps):
            self.assertIn(("127.0.0.1", port), socks, f"the other processes' sockets\n{diag}")
            row = socks[("127.0.0.1", port)]
            self.assertGreater(int(row[4]), 0, f"SndBuf\n{diag}")
            self.assertGreater(int(row[5]), 0, f"RcvBuf\n{diag}")

        counters = {row[0]: int(row[1]) for row in secs["Counters:"]}
        self.assertGreater(sum(counters.values()), 0, diag)
        self.assertGreaterEqual(counters.get("send_queued", 0), 5, f"S's sends, host-wide\n{diag}")
        self.assertGreaterEqual(counters.get("recv_queued", 0), 5, f"R's queue, host-wide\n{diag}")

        conns = secs["RDS Connections:"]
        self.assertTrue(any(c[0] == "127.0.0.1" and c[1] == "127.0.0.1" and "C" in " ".join(c[5:])
                            for c in conns), f"connection 127.0.0.1 -> 127.0.0.1 (C)\n{diag}")
        # (How many rows, and their sequence numbers: test_loopback_connection_is_one_row.)

        rq = [row for row in secs["Receive Message Queue:"] if int(row[1]) == pr]
        self.assertEqual([(row[0], row[2], int(row[3]), int(row[6])) for row in rq],
                         [("127.0.0.1", "127.0.0.1", ps, 100 + i) for i in range(5)],
                         f"R's queue: local R, remote S, 100..104 bytes\n{diag}")
        seqs = [int(row[5]) for row in rq]
        self.assertEqual(seqs, sorted(seqs), f"sequence numbers in order\n{diag}")
        self.assertEqual(len(set(seqs)), 5, diag)

        # IPv6 variants (-a): v4-mapped shown as IPv4; the same sockets and messages.
        p, secs6, order6, traces6, err6 = self.info("info-a", ["-a", "-k", "-r"], rundir)
        diag6 = p.diag() + "\n" + err6
        self.assertEqual(order6, ["RDS Sockets:", "Receive Message Queue:"], diag6)
        self.assertEqual({int(t.group(1)) for t in traces6}, {10015, 10014}, diag6)
        ports6 = {(row[0], int(row[1])) for row in secs6["RDS Sockets:"]}
        self.assertTrue({("127.0.0.1", pr), ("127.0.0.1", ps)} <= ports6, diag6)
        rq6 = [row for row in secs6["Receive Message Queue:"] if int(row[1]) == pr]
        self.assertEqual([int(row[6]) for row in rq6], [100 + i for i in range(5)], diag6)

        # One source only.
        p, secs_k, order_k, traces_k, errk = self.info("info-k", ["-k"], rundir)
        self.assertEqual(order_k, ["RDS Sockets:"], p.diag())
        self.assertEqual({int(t.group(1)) for t in traces_k}, {10006}, errk)
        self.assertNotIn("Unable", errk)

        # Counters never go backwards; R drains, the receive queue empties.
        r.send("drain")
        self.assertEqual(r.expect("drained", STEP_TIMEOUT), "drained 5")
        p, secs2, _, _, err2 = self.info("info-after", ["-c", "-r"], rundir)
        counters2 = {row[0]: int(row[1]) for row in secs2["Counters:"]}
        for name, v in counters.items():
            if name.startswith(("send_", "recv_", "cong_", "copy_")):
                self.assertGreaterEqual(counters2.get(name, 0), v, f"counter {name} decreased\n"
                                        f"{p.diag()}")
        self.assertEqual([row for row in secs2["Receive Message Queue:"] if int(row[1]) == pr], [],
                         f"R drained its queue\n{p.diag()}")

        for h in (r, s):
            h.send("quit")
            self.assertEqual(h.wait(STEP_TIMEOUT), 0, h.diag())

    def test_loopback_connection_is_one_row(self):
        """Kernel: the sockets 127.0.0.1:PS -> 127.0.0.1:PR share ONE rds_connection
        (laddr, faddr) = (127.0.0.1, 127.0.0.1) on the loopback transport, looked up by address
        pair in both directions (`__rds_conn_create`); `rds_loop_xmit` delivers through
        `rds_recv_incoming` on that same connection, so after 5 messages rds-info -n shows one
        row with NextTX 6 and NextRX 6 (kernel-rds.md §A.8 table, §C.5, §C.6 last point)."""
        rundir = itlib.make_tmpdir("info-loopconn")
        base = random.randrange(20000, 60000)
        r, pr = self.holder("holder-R", "127.0.0.1", base, rundir)
        s, ps = self.holder("holder-S", "127.0.0.1", base + 1, rundir)
        s.send(f"send 127.0.0.1 {pr} 5 10")
        s.expect("sent", STEP_TIMEOUT)
        self.assertEqual(len(self.wait_recv_queue(rundir, pr, 5)), 5)
        p, secs, _, _, err = self.info("info-n", ["-n"], rundir)
        rows = [c for c in secs["RDS Connections:"] if c[0] == c[1] == "127.0.0.1"]
        self.assertEqual([(int(c[3]), int(c[4]), " ".join(c[5:])) for c in rows], [(6, 6, "-- C-")],
                         f"one loopback connection 127.0.0.1 -> 127.0.0.1, NextTX 6, NextRX 6\n"
                         f"{p.diag()}")
        for h in (r, s):
            h.send("quit")
            self.assertEqual(h.wait(STEP_TIMEOUT), 0, h.diag())

    def test_two_hosts(self):
        itlib.require_netns()
        tag = itlib.unique_tag()
        n = random.randrange(1, 255)
        ns_a = itlib.add_netns(f"rdsit{tag}a")
        ns_b = itlib.add_netns(f"rdsit{tag}b")
        ip_a, ip_b = f"10.81.{n}.1", f"10.81.{n}.2"
        itlib.add_veth(ns_a, f"ri{tag}a", f"{ip_a}/24", ns_b, f"ri{tag}b", f"{ip_b}/24")
        itlib.wait_addr_ready(ns_a, ip_a)
        itlib.wait_addr_ready(ns_b, ip_b)
        rundir_a = itlib.make_tmpdir("info-hostA")
        rundir_b = itlib.make_tmpdir("info-hostB")

        rb, pb = self.holder("holder-B", ip_b, 4001, rundir_b, netns=ns_b)
        sa, pa = self.holder("holder-A", ip_a, 4002, rundir_a, netns=ns_a)
        sa.send(f"send {ip_b} {pb} 3 200")
        sa.expect("sent", STEP_TIMEOUT)
        rows = self.wait_recv_queue(rundir_b, pb, 3, netns=ns_b)
        self.assertEqual([(r[0], r[2], int(r[3]), int(r[6])) for r in rows],
                         [(ip_b, ip_a, pa, 200 + i) for i in range(3)],
                         f"B's queue holds A's 3 messages: {rows}")

        p, secs, order, traces, err = self.info("info-A", ["-T", "-k", "-n", "-s", "-t"], rundir_a,
                                                netns=ns_a)
        diag = p.diag() + "\n" + err
        self.assertEqual(order, ["TCP Connections:", "RDS Sockets:", "RDS Connections:",
                                 "Send Message Queue:", "Retransmit Message Queue:"], diag)
        tcp = secs["TCP Connections:"]
        self.assertTrue(any((t[0], t[2]) == (ip_a, ip_b) and 16385 in (int(t[1]), int(t[3]))
                            for t in tcp), f"A's TCP connection with B:16385 or from it\n{diag}")
        socks = {(row[0], int(row[1])) for row in secs["RDS Sockets:"]}
        self.assertIn((ip_a, pa), socks, diag)
        self.assertNotIn((ip_b, pb), socks, f"B's socket is in another namespace\n{diag}")
        self.assertTrue(any(c[0] == ip_a and c[1] == ip_b and "C" in " ".join(c[5:])
                            for c in secs["RDS Connections:"]), f"connection A -> B (C)\n{diag}")

        p, secs_b, _, _, errb = self.info("info-B", ["-n", "-T", "-c"], rundir_b, netns=ns_b)
        diagb = p.diag() + "\n" + errb
        # rds_tcp's counters follow the core ones; B's engine read A's messages from TCP.
        names_b = [row[0] for row in secs_b["Counters:"]]
        self.assertEqual(names_b[36:41], ["tcp_data_ready_calls", "tcp_write_space_calls",
                                          "tcp_sndbuf_full", "tcp_connect_raced",
                                          "tcp_listen_closed_stale"], diagb)
        counters_b = {row[0]: int(row[1]) for row in secs_b["Counters:"]}
        self.assertGreater(counters_b["tcp_data_ready_calls"], 0, diagb)
        self.assertTrue(any(c[0] == ip_b and c[1] == ip_a for c in secs_b["RDS Connections:"]),
                        f"connection B -> A\n{diagb}")
        self.assertTrue(any((t[0], t[2]) == (ip_b, ip_a) for t in secs_b["TCP Connections:"]),
                        diagb)

        for h in (rb, sa):
            h.send("quit")
            self.assertEqual(h.wait(STEP_TIMEOUT), 0, h.diag())


if __name__ == "__main__":
    itlib.run_tests(limit_seconds=55)
