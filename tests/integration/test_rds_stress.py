#!/usr/bin/env python3
"""rds-stress's exact behaviour (rds-tools.md §3) under the shim, replayed by rds_tools_replay:
a passive and an active parent joined by a plain TCP control connection (not RDS: it must pass
through the shim untouched), the options negotiation (V1 / full struct with version string /
2.3.11 JSON exchange), one forked child per task with the §3.2 socket sequence (SO_REUSEADDR,
bind port+1+i, SO_SNDBUF/SO_RCVBUF = tasks*depth*(req+ack)*2 and the getsockopt check,
RDS_CONG_MONITOR, fcntl(F_SETFL, O_NONBLOCK), SIOCRDSSETTOS for -Q, SO_RDS_INQ = 12 at a
literal 276), the §3.4 poll/sendmsg/recvmsg loop (POLLOUT only after a failed send, EAGAIN and
ENOBUFS, RDS_CMSG_CONG_UPDATE, RDS_CMSG_INQ-driven draining, msg_name checks) and the §3.3
per-source sequence numbers with the receiver's fatal header checks; `--reset` = bind +
setsockopt(SOL_RDS, 8, struct rds_reset {tos, src, dst}, 12).

Pass for every pair (§3.7): both sides exit 0, print the negotiation, "Starting up....", the
header, one stats line per second with non-zero tx/s and rx/s (one-way: the passive only ACKs),
the "(average)" line; the exact totals (the replay's "replay: totals" line, summed over the
children after they were reaped) match: REQs sent by one side == REQs received by the other;
with SO_RDS_INQ on (the default) every data message received carried an RDS_CMSG_INQ, with
--disable-inq none did.

1. One host, four pairs at once (passive 127.0.0.1, active 127.0.0.2, distinct port ranges),
   -t 2 -d 4 -T 4: default sizes (1024/63); -q 8192 -a 256 -v; -q 65536 -a 1024 -v;
   -q 4096 -o --disable-inq --use-cong-monitor 0 (the JSON negotiation, no INQ, no monitor).
   While they run: `--reset -r 127.0.0.2 -s 127.0.0.1` exits 0; the stats lines printed after
   it are still non-zero.
2. Two hosts (namespaces over a veth; needs root, else skipped), two pairs at once, -t 2 -d 4
   -T 5: -Q 8 (TCP transport: SIOCRDSSETTOS accepted; forces the full options struct) and
   -q 16384 -a 128 -v. While they run, `--reset -r A -s B` (tos 0) and `--reset ... -Q 8` from
   host A exit 0; traffic continues and the totals match.
3. Two hosts: a message A -> B opens the RDS TCP connection; `--reset -r A -s B` from another
   process (as rds-stress always does it) must drop it: no TCP connection rds-info -T showed on
   A before the reset exists after it (UEK rds_user_reset drops the netns's connection, whose
   paths reconnect with new sockets); a message sent afterwards is still delivered.

Expected run time: ~30 s (each group of pairs: ~1 s negotiation + 4 s start-up + -T + 1 s
stop; the reset test ~2 s).
"""

import os
import random
import subprocess
import re
import sys
import time
import unittest

import itlib

itlib._DEFAULTS.setdefault("RDS_TOOLS_REPLAY", os.path.join(
    itlib.BUILD_DIR, "tests", "integration", "rds_tools_replay"))

STEP_TIMEOUT = 20
STATS = re.compile(r"^ +(\d+) +(\d+) +(\d+) +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+) +(-?[\d.]+)$")
AVERAGE = re.compile(r"^ +\d+ .*\(average\)$")
TOTALS = re.compile(r"^replay: totals req_tx (\d+) req_rx (\d+) ack_tx (\d+) ack_rx (\d+) "
                    r"inq_msgs (\d+) cong_updates (\d+)$")


# One RDS socket driven by stdin: "send ADDR PORT" sends one 100-byte message and prints
# "sent"; every message received is reported as "got 1". Prints "bound <port>" first.
HOLDER = r"""
import select, socket, sys
s = socket.socket(socket.AF_RDS, socket.SOCK_SEQPACKET, 0)
s.bind((sys.argv[1], int(sys.argv[2])))
print("bound", s.getsockname()[1], flush=True)
while True:
    r, _, _ = select.select([sys.stdin, s], [], [])
    if s in r:
        # Not always data: with RDS_CONG_MONITOR off, poll/select also report POLLIN once after
        # any congestion-map update (kernel-rds.md A.6).
        try:
            s.recv(65536, socket.MSG_DONTWAIT)
            print("got 1", flush=True)
        except BlockingIOError:
            pass
    if sys.stdin in r:
        cmd = sys.stdin.readline().split()
        if not cmd or cmd[0] == "quit":
            break
        if cmd[0] == "send":
            s.sendto(b"r" * 100, (cmd[1], int(cmd[2])))
            print("sent", flush=True)
"""


def replay():
    return itlib.path_of("RDS_TOOLS_REPLAY")


class Pair:
    """One passive + one active rds-stress (the replay) run."""

    def __init__(self, name, passive_addr, active_addr, port, args, rundir_p, rundir_a,
                 ns_p=None, ns_a=None):
        self.name = name
        self.args = [str(a) for a in args]
        self.one_way = "-o" in self.args
        self.passive = itlib.Proc(f"{name}-passive", [replay(), "-r", passive_addr, "-p", port],
                                  rundir_p, netns=ns_p)
        self.passive.expect("waiting for incoming connection on", STEP_TIMEOUT)
        self.active = itlib.Proc(f"{name}-active", [replay(), "-r", active_addr, "-s", passive_addr,
                                                    "-p", port] + self.args, rundir_a, netns=ns_a)
        for p in (self.passive, self.active):
            p.close_stdin()

    def wait_stats_lines(self, n, timeout):
        """Blocks until the active side printed n stats lines; returns how many it has."""
        end = time.monotonic() + timeout
        while sum(1 for l in self.active.lines if STATS.match(l)) < n:
            line = self.active.readline(max(0.0, end - time.monotonic()))
            if line is None:
                break
        return sum(1 for l in self.active.lines if STATS.match(l))

    def finish(self, timeout):
        rc_a = self.active.wait(timeout)
        rc_p = self.passive.wait(timeout)
        return rc_a, rc_p

    def diag(self):
        return self.passive.diag() + "\n" + self.active.diag()


class RdsStress(unittest.TestCase):
    def check_side(self, pair, proc, rc, role, min_lines, after=0):
        diag = pair.diag()
        self.assertEqual(rc, 0, f"{pair.name} {role} must exit 0\n{diag}")
        lines = proc.lines
        self.assertIn("negotiated options, tasks will start in 2 seconds", lines, diag)
        self.assertIn("Starting up....", lines, diag)
        stats = [STATS.match(l) for l in lines if STATS.match(l)]
        self.assertGreaterEqual(len(stats), min_lines, f"{pair.name} {role}: stats lines\n{diag}")
        sends_reqs = not (pair.one_way and role == "passive")
        gets_reqs = not (pair.one_way and role == "active")
        # Every full second of the run: REQs sent and received. The passive's last line may
        # cover only the moment the active closed the control connection.
        full = stats[:min_lines]
        for i, m in enumerate(full):
            tx, rx = int(m.group(2)), int(m.group(3))
            self.assertEqual(int(m.group(1)), int(pair.args[pair.args.index("-t") + 1]), diag)
            if sends_reqs:
                self.assertGreater(tx, 0, f"{pair.name} {role} line {i + 1}: tx/s is 0\n{diag}")
            else:
                self.assertEqual(tx, 0, f"{pair.name} {role}: -o passive sends no REQ\n{diag}")
            if gets_reqs:
                self.assertGreater(rx, 0, f"{pair.name} {role} line {i + 1}: rx/s is 0\n{diag}")
            else:
                self.assertEqual(rx, 0, diag)
            self.assertGreater(float(m.group(4)), 0.0, diag)
        if after:
            # The lines checked above include at least one printed after the reset.
            self.assertLess(after, min_lines, f"{pair.name}: no stats line after the reset\n{diag}")
        self.assertTrue(any(AVERAGE.match(l) for l in lines), f"no (average) line\n{diag}")
        self.assertTrue(any(l.startswith("-----") for l in lines), diag)
        totals = [TOTALS.match(l) for l in lines if TOTALS.match(l)]
        self.assertEqual(len(totals), 1, diag)
        return [int(x) for x in totals[0].groups()]

    def check_pair(self, pair, rc_a, rc_p, run_time, reset_at_line=0):
        itlib.log(f"--- {pair.name}: {' '.join(pair.args)} (exit {rc_a}/{rc_p})\n  active:\n    " +
                  "\n    ".join(pair.active.lines) + "\n  passive:\n    " +
                  "\n    ".join(pair.passive.lines))
        act = self.check_side(pair, pair.active, rc_a, "active", run_time, reset_at_line)
        pas = self.check_side(pair, pair.passive, rc_p, "passive", run_time - 1)
        diag = pair.diag()
        self.assertEqual(act[0], pas[1], f"{pair.name}: REQs sent by the active {act[0]} != "
                         f"received by the passive {pas[1]}\n{diag}")
        self.assertEqual(pas[0], act[1], f"{pair.name}: REQs sent by the passive {pas[0]} != "
                         f"received by the active {act[1]}\n{diag}")
        self.assertGreater(act[0], 0, diag)
        # Every ACK received answers a REQ sent; at most depth per flow are still outstanding.
        self.assertLessEqual(act[3], act[0], diag)
        self.assertLessEqual(pas[2], pas[1], diag)
        # SO_RDS_INQ (on unless --disable-inq): every data message carries RDS_CMSG_INQ.
        want_inq = "--disable-inq" not in pair.args
        for side, t in (("active", act), ("passive", pas)):
            self.assertEqual(t[4], t[1] + t[3] if want_inq else 0,
                             f"{pair.name} {side}: data messages with RDS_CMSG_INQ\n{diag}")
        for p in (pair.active, pair.passive):
            err = p.stderr_text()
            self.assertNotIn("Setting RDS_INQ flag failed", "\n".join(p.lines), diag)
            self.assertNotIn("Kernel does not support congestion monitoring", "\n".join(p.lines), diag)
            self.assertNotIn("bogus", err, diag)

    def reset(self, name, rundir, src, dst, tos=0, netns=None):
        argv = [replay(), "--reset", "-r", src, "-s", dst]
        if tos:
            argv += ["-Q", tos]
        p = itlib.Proc(name, argv, rundir, netns=netns)
        p.close_stdin()
        rc = p.wait(STEP_TIMEOUT)
        itlib.log(f"--- {name}: exit {rc}: {p.lines}")
        self.assertEqual(rc, 0, f"--reset must exit 0\n{p.diag()}")

    def tcp_connections(self, rundir, netns):
        """{(local, lport, remote, rport)} from `rds-info -T` (the replay)."""
        p = itlib.Proc("info-T", [replay(), "info", "-T"], rundir, netns=netns)
        p.close_stdin()
        self.assertEqual(p.wait(STEP_TIMEOUT), 0, p.diag())
        return {tuple(l.split()[:4]) for l in p.lines if re.match(r"^ +\d+\.\d+\.\d+\.\d+ +\d+ ", l)}

    def run_group(self, specs, reset_args, run_time, rundirs, netns=(None, None)):
        """Starts every pair, resets once the first has printed its first stats line, waits."""
        pairs = [Pair(*spec, rundirs[0], rundirs[1], ns_p=netns[0], ns_a=netns[1]) for spec in specs]
        got = pairs[0].wait_stats_lines(1, STEP_TIMEOUT)
        self.assertGreaterEqual(got, 1, f"no stats line\n{pairs[0].diag()}")
        reset_at = {}
        for p in pairs:
            reset_at[p.name] = sum(1 for l in p.active.lines if STATS.match(l))
        for i, (src, dst, tos) in enumerate(reset_args):
            self.reset(f"reset{i}", rundirs[1], src, dst, tos, netns=netns[1])
        for p in pairs:
            rc_a, rc_p = p.finish(run_time + 25)
            self.check_pair(p, rc_a, rc_p, run_time, reset_at_line=reset_at[p.name])

    def test_sync_always_bursty_keys_one_semaphore_per_host(self):
        """rds-stress 2.3.11 keys its burst-mode semaphore with ftok("/sys/module/rds", 'S') and
        exits when that fails (no module): under the shim every process of the host gets the
        same key (issue 22)."""
        rundir = itlib.make_tmpdir("stress-ftok")
        keys = []
        for i in range(2):
            p = itlib.Proc(f"ftok{i}", [replay(), "--sync-key-only"], rundir)
            p.close_stdin()
            rc = p.wait(STEP_TIMEOUT)
            self.assertEqual(rc, 0, f"the replay exited {rc}\n{p.diag()}")
            keys += [l.split()[1] for l in p.lines if l.startswith("sync-key ")]
        self.assertEqual(len(keys), 2, keys)
        self.assertEqual(keys[0], keys[1], "two processes of one host got different keys")
        # The semaphore is the test's: remove it (ipcrm, best effort).
        subprocess.run(["ipcrm", "-S", keys[0]], capture_output=True, timeout=10)

    def test_one_host_four_pairs_and_reset(self):
        rundir = itlib.make_tmpdir("stress-local")
        base = random.randrange(200, 600) * 100
        t = 4
        common = ["-t", 2, "-d", 4, "-T", t]
        specs = [
            ("default", "127.0.0.1", "127.0.0.2", base, common),
            ("q8k", "127.0.0.1", "127.0.0.2", base + 10, common + ["-q", 8192, "-a", 256, "-v"]),
            ("q64k", "127.0.0.1", "127.0.0.2", base + 20, common + ["-q", 65536, "-a", 1024, "-v"]),
            ("oneway-noinq", "127.0.0.1", "127.0.0.2", base + 30,
             common + ["-q", 4096, "-o", "--disable-inq", "--use-cong-monitor", 0]),
        ]
        self.run_group(specs, [("127.0.0.2", "127.0.0.1", 0)], t, (rundir, rundir))

    def test_two_hosts_tos_and_reset(self):
        itlib.require_netns()
        tag = itlib.unique_tag()
        n = random.randrange(1, 255)
        ns_a = itlib.add_netns(f"rdsit{tag}a")
        ns_b = itlib.add_netns(f"rdsit{tag}b")
        ip_a, ip_b = f"10.83.{n}.1", f"10.83.{n}.2"
        itlib.add_veth(ns_a, f"rs{tag}a", f"{ip_a}/24", ns_b, f"rs{tag}b", f"{ip_b}/24")
        itlib.wait_addr_ready(ns_a, ip_a)
        itlib.wait_addr_ready(ns_b, ip_b)
        rundir_b = itlib.make_tmpdir("stress-hostB")
        rundir_a = itlib.make_tmpdir("stress-hostA")
        t = 5
        common = ["-t", 2, "-d", 4, "-T", t]
        specs = [
            ("netns-tos", ip_b, ip_a, 4000, common + ["-Q", 8]),
            ("netns-q16k", ip_b, ip_a, 4100, common + ["-q", 16384, "-a", 128, "-v"]),
        ]
        self.run_group(specs, [(ip_a, ip_b, 0), (ip_a, ip_b, 8)], t, (rundir_b, rundir_a),
                       netns=(ns_b, ns_a))

    def test_reset_from_another_process_drops_the_tcp_connection(self):
        """rds-stress --reset is its own process (bind + setsockopt, exit). In the kernel the
        connection (laddr, faddr) is the netns's, shared by every socket: UEK rds_user_reset
        drops all its paths, whose TCP sockets are closed (they reconnect with new ones). So
        no TCP connection that rds-info -T showed before the reset may still exist after it."""
        itlib.require_netns()
        tag = itlib.unique_tag()
        n = random.randrange(1, 255)
        ns_a = itlib.add_netns(f"rdsit{tag}c")
        ns_b = itlib.add_netns(f"rdsit{tag}d")
        ip_a, ip_b = f"10.84.{n}.1", f"10.84.{n}.2"
        itlib.add_veth(ns_a, f"rr{tag}a", f"{ip_a}/24", ns_b, f"rr{tag}b", f"{ip_b}/24")
        itlib.wait_addr_ready(ns_a, ip_a)
        itlib.wait_addr_ready(ns_b, ip_b)
        rundir_a = itlib.make_tmpdir("reset-hostA")
        rundir_b = itlib.make_tmpdir("reset-hostB")
        rx = itlib.Proc("rx-B", [sys.executable, "-c", HOLDER, ip_b, 4001], rundir_b, netns=ns_b)
        rx.expect("bound", STEP_TIMEOUT)
        tx = itlib.Proc("tx-A", [sys.executable, "-c", HOLDER, ip_a, 4002], rundir_a, netns=ns_a)
        tx.expect("bound", STEP_TIMEOUT)
        tx.send(f"send {ip_b} 4001")
        tx.expect("sent", STEP_TIMEOUT)
        self.assertEqual(rx.expect("got", STEP_TIMEOUT), "got 1")
        before = self.tcp_connections(rundir_a, ns_a)
        self.assertTrue(before, "rds-info -T shows the TCP connection A -> B:16385")
        self.reset("reset-A", rundir_a, ip_a, ip_b, 0, netns=ns_a)
        time.sleep(0.5)
        after = self.tcp_connections(rundir_a, ns_a)
        itlib.log(f"TCP connections before the reset {sorted(before)}, after {sorted(after)}")
        # The connection still works afterwards.
        tx.send(f"send {ip_b} 4001")
        tx.expect("sent", STEP_TIMEOUT)
        self.assertEqual(rx.expect("got", STEP_TIMEOUT), "got 1")
        for h in (tx, rx):
            h.send("quit")
            self.assertEqual(h.wait(STEP_TIMEOUT), 0, h.diag())
        self.assertEqual(before & after, set(),
                         f"TCP connections that survived RDS_CONN_RESET {ip_a} -> {ip_b} issued by "
                         f"another process (before {sorted(before)}, after {sorted(after)})")


if __name__ == "__main__":
    itlib.run_tests(limit_seconds=85)
