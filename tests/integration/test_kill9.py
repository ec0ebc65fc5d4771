#!/usr/bin/env python3
"""kill -9 of RDS processes in the middle of traffic (issue 3, proof 6).

Helpers: seq_peer.py (CPython on socket.AF_RDS under LD_PRELOAD) -- senders number their
messages 0, 1, 2, ... per sender tag; the receiver records what arrived, per tag, as runs of
consecutive numbers in arrival order.

(a) A receiving process is killed, then a new process binds the same port (DESIGN.md §3.4).
    The receiver R1 binds P with a small receive buffer and does not read, so the senders
    (blocking sockets) end up blocked in sendto -- by congestion, or on 127.0.0.1 by their
    full send buffers: each one is checked to be blocked (>= 300 ms) before R1 is killed
    with SIGKILL. Then:
      * every blocked sendto returns within BLOCKED_RETURN_S, and the senders keep sending
        (to an unbound port: the messages are dropped) without blocking;
      * a new process R2 binds P (the dead process's port is free at once). Each sender is
        asked for its counters just before R2's bind() (B = calls that had returned) and just
        after it returned (A = calls that had begun). Senders go on for >= 500 more messages
        and stop (F = their last call + 1). R2 must receive, from each sender, exactly the
        numbers X .. F-1, in order, once each, for some X with B <= X <= A: nothing addressed
        to its predecessor or sent while P was unbound (numbers < B), everything whose
        sendmsg() began after its bind (numbers >= A). [B, A) is the unavoidable uncertainty
        of when, relative to the bind, a call ran. For a sender on another host the lower
        bound does not apply (DESIGN.md §3.4: as with kernel RDS, delivery is decided when
        a message reaches the receiver's host).
    Same host: R and two senders in one namespace (Unix links). Other namespace (root only):
    R in host B with one sender on host B and one on host A (TCP).
(b) A sending process is killed: the receiver R gets traffic from senders K (killed with
    SIGKILL mid-traffic) and L (survivors). Then:
      * L's traffic keeps flowing (>= 2000 more messages after the kill) and, after L stops,
        R has exactly L's messages 0 .. F-1, in order, once each;
      * what R got from K is a gap-free prefix 0 .. k (in order, no duplicate);
      * new senders N bind the dead senders' addresses and deliver 2000 messages each, all of
        them, in order.
    Same host, and (root only) across namespaces: R on host B, K and L on both hosts.

Every wait is bounded; processes, namespaces and registry directories are removed whatever
happens. Expected run time: ~10-30 s (the namespace cases are skipped without root).
"""

import collections
import os
import signal
import sys
import time
import unittest

import itlib

BLOCKED_RETURN_S = 10       # a sendto blocked on a dead receiver must return within this
STEP_TIMEOUT = 20
RECV_PORT = 7000

Host = collections.namedtuple("Host", "name ns ip rundir")


def parse_runs(lines):
    """{tag: (src, [(first, last), ...])} from a receiver's "runs" reply."""
    out = {}
    for line in lines:
        if not line.startswith("runs ") or line == "runs-end":
            continue
        parts = line.split()
        tag, src = parts[1], parts[2].split("=", 1)[1]
        runs = []
        if len(parts) > 3:
            for item in parts[3].split(","):
                a, b = item.split("-")
                runs.append((int(a), int(b)))
        out[tag] = (src, runs)
    return out


class Kill9(unittest.TestCase):
    def setUp(self):
        self.helper = itlib.script("seq_peer.py")
        itlib.path_of("RDS_IT_PRELOAD_LIB")

    # ---------------------------------------------------------------------------------------
    # plumbing

    def start(self, name, host, args):
        p = itlib.Proc(name, [sys.executable, self.helper] + [str(a) for a in args],
                       host.rundir, netns=host.ns)
        return p

    def same_host(self, label):
        return Host("local", None, "127.0.0.1", itlib.make_tmpdir(f"kill9-{label}"))

    def two_hosts(self, label):
        itlib.require_netns()
        ns_a, ip_a, ns_b, ip_b = itlib.make_two_hosts(label)
        return (Host("A", ns_a, ip_a, itlib.make_tmpdir(f"kill9-{label}-A")),
                Host("B", ns_b, ip_b, itlib.make_tmpdir(f"kill9-{label}-B")))

    def kill9(self, proc):
        # The child must be the helper itself (ip netns exec and env exec, they do not fork).
        with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
            cmdline = f.read()
        self.assertIn(b"seq_peer.py", cmdline, f"pid {proc.pid} is not the helper: {cmdline!r}")
        os.kill(proc.pid, signal.SIGKILL)
        proc.p.wait(timeout=10)
        self.assertEqual(proc.p.returncode, -signal.SIGKILL)

    def state(self, sender):
        return itlib.kv_fields(itlib.ask(sender, "state", "state"))

    def counts(self, receiver):
        return {k: int(v) for k, v in itlib.kv_fields(itlib.ask(receiver, "count", "count")).items()}

    def runs(self, receiver):
        receiver.send("runs")
        receiver.expect("runs-end", 10)
        start = max(i for i, l in enumerate(receiver.lines) if l == "runs-end")
        block = []
        for line in reversed(receiver.lines[:start]):
            if not line.startswith("runs ") or line == "runs-end":
                break
            block.append(line)
        return parse_runs(block)

    def wait_until(self, what, pred, timeout, diag):
        end = time.monotonic() + timeout
        while True:
            v = pred()
            if v:
                return v
            if time.monotonic() > end:
                self.fail(f"timeout after {timeout} s waiting for {what}\n" + diag())
            time.sleep(0.05)

    @staticmethod
    def diag_of(*procs):
        return lambda: "\n".join(p.diag() for p in procs)

    # ---------------------------------------------------------------------------------------
    # (a) the receiver dies, a new process binds its port

    def receiver_killed(self, recv_host, sender_hosts):
        raddr = f"{recv_host.ip}:{RECV_PORT}"
        r1 = self.start("R1", recv_host, ["recv", "--bind", raddr, "--paused",
                                          "--rcvbuf", 65536])
        r1.expect("bound", 20)
        senders = []
        remote = set()  # senders on another host than the receiver
        for i, h in enumerate(sender_hosts):
            s = self.start(f"S{i}{h.name}", h, ["send", "--bind", f"{h.ip}:{7100 + i}",
                                                "--dest", raddr, "--tag", f"S{i}",
                                                "--size", 2000, "--sndbuf", 262144])
            s.expect("bound", 20)
            senders.append(s)
            if h is not recv_host:
                remote.add(s.name)
        everyone = [r1] + senders
        for s in senders:
            s.send("go")

        # Precondition: every sender is blocked in sendto (congested by R1's full queue).
        at_kill = {}
        for s in senders:
            st = self.wait_until(
                f"{s.name} to be blocked in sendto by the non-reading receiver",
                lambda: (lambda d: d if float(d["blocked_ms"]) >= 300 else None)(self.state(s)),
                STEP_TIMEOUT, self.diag_of(*everyone))
            at_kill[s.name] = st
        itlib.log("before the kill: " + "; ".join(
            f"{n} started={d['started']} completed={d['completed']} blocked_ms={d['blocked_ms']}"
            for n, d in at_kill.items()))
        # Re-check right before the kill (a call may have completed meanwhile).
        for s in senders:
            at_kill[s.name] = self.state(s)
        t_kill = time.monotonic()
        self.kill9(r1)

        # Every call in progress at the kill returns, in bounded time; sending goes on.
        pending = {s.name: s for s in senders}
        while pending and time.monotonic() - t_kill < BLOCKED_RETURN_S:
            for name, s in list(pending.items()):
                st = self.state(s)
                if int(st["completed"]) >= int(at_kill[name]["started"]):
                    itlib.log(f"{name}: blocked call returned within "
                              f"{time.monotonic() - t_kill:.2f} s of the kill; {st['completed']} "
                              f"calls done, errors {st['errors']}")
                    del pending[name]
            time.sleep(0.05)
        if pending:
            where = {s.name: ("same host as the receiver" if s.name.endswith(recv_host.name)
                              else "other host") for s in senders}
            self.fail("\n".join(
                f"{n} ({where[n]}): its sendto (call {int(at_kill[n]['started']) - 1}), blocked "
                f"when the receiver was killed, has not returned after {BLOCKED_RETURN_S} s: "
                f"{itlib.ask(s, 'state', 'state')}" for n, s in pending.items()) + "\n" +
                self.diag_of(*senders)())
        for s in senders:
            before = int(self.state(s)["completed"])
            self.wait_until(f"{s.name} to keep sending after the receiver died",
                            lambda: int(self.state(s)["completed"]) >= before + 200,
                            STEP_TIMEOUT, self.diag_of(*senders))

        # The new receiver binds the same port.
        r2 = self.start("R2", recv_host, ["recv", "--bind", raddr, "--bind-on-go"])
        everyone = [r2] + senders
        r2.expect("ready", 20)
        before = {s.name: itlib.kv_fields(itlib.ask(s, "mark", "mark")) for s in senders}
        r2.send("go")
        line = r2.expect(("bound", "bind-error"), 20)
        self.assertTrue(line.startswith("bound"),
                        f"the dead receiver's port is not free: R2 {line}\n{r2.diag()}")
        after = {s.name: itlib.kv_fields(itlib.ask(s, "mark", "mark")) for s in senders}
        for s in senders:
            start_a = int(after[s.name]["started"])
            self.wait_until(f"{s.name} to send 500 messages after R2 bound",
                            lambda: int(self.state(s)["completed"]) >= start_a + 500,
                            STEP_TIMEOUT, self.diag_of(*everyone))
        final = {}
        for s in senders:
            s.send("stop")
            final[s.name] = itlib.kv_fields(s.expect("stopped", STEP_TIMEOUT))

        # Everything sent after the bind arrives (bounded wait), then the exact check.
        def all_arrived():
            c = self.counts(r2)
            for s in senders:
                tag = s.name[:2]
                if c.get(tag, 0) < int(final[s.name]["completed"]) - int(after[s.name]["started"]):
                    return None
            return c
        try:
            self.wait_until("R2 to receive what was sent after its bind", all_arrived,
                            STEP_TIMEOUT, self.diag_of(*everyone))
        except AssertionError:
            pass  # the exact check below says what is missing
        time.sleep(0.3)  # late duplicates would arrive now
        runs = self.runs(r2)
        problems = []
        for s in senders:
            tag = s.name[:2]
            b = int(before[s.name]["completed"])
            a = int(after[s.name]["started"])
            f = int(final[s.name]["completed"])
            failed = [x for x in final[s.name]["failed"].split(",") if x != "none"]
            late_failures = [x for x in failed if int(x.split(":")[0]) >= b]
            if late_failures:
                problems.append(f"{tag}: sendto failed after the kill: {late_failures}")
            got = runs.get(tag, (None, []))[1]
            desc = (f"{tag} ({s.name}): B={b} A={a} F={f}, R2 received runs "
                    f"{got[:6]}{' ...' if len(got) > 6 else ''}")
            itlib.log(desc)
            if len(got) != 1:
                problems.append(f"{desc}: expected one run X..{f - 1} (gaps, duplicates or "
                                f"reordering otherwise)")
                continue
            x, last = got[0]
            # Same host: exact (delivery is decided when sendmsg runs, as with kernel
            # loopback). Another host: as with kernel RDS, delivery is decided when the
            # message reaches the receiver's host, so messages sent shortly before the bind
            # and still on their way (DESIGN.md §3.4) may reach R2; the single run checked
            # above still rules out anything routed to R1 (it would leave a gap or a
            # duplicate) and any loss after the first delivered message.
            if x < b and s.name not in remote:
                problems.append(f"{desc}: received message {x}, sent before R2 bound (to the "
                                f"dead receiver or to the unbound port)")
            if x > a:
                problems.append(f"{desc}: messages {a}..{x - 1} were sent after R2 bound but "
                                f"never arrived")
            if last != f - 1:
                problems.append(f"{desc}: the last message received is {last}, expected {f - 1}")
        if problems:
            self.fail("\n".join(problems) + "\n" + self.diag_of(*everyone)())
        for p in everyone:
            p.send("quit")
        for p in everyone:
            self.assertEqual(p.wait(10), 0, p.diag())

    def test_receiver_killed_same_host(self):
        h = self.same_host("rs")
        self.receiver_killed(h, [h, h])

    def test_receiver_killed_other_namespace(self):
        a, b = self.two_hosts("r")
        self.receiver_killed(b, [a, b])

    # ---------------------------------------------------------------------------------------
    # (b) a sender dies; the receiver's engine keeps serving the others

    def sender_killed(self, recv_host, sender_hosts):
        raddr = f"{recv_host.ip}:{RECV_PORT}"
        r = self.start("R", recv_host, ["recv", "--bind", raddr])
        r.expect("bound", 20)
        killed, living = [], []
        for i, h in enumerate(sender_hosts):
            for group, letter, port in ((killed, "K", 7200), (living, "L", 7300)):
                p = self.start(f"{letter}{i}{h.name}", h,
                               ["send", "--bind", f"{h.ip}:{port + i}", "--dest", raddr,
                                "--tag", f"{letter}{i}", "--size", 1000])
                p.expect("bound", 20)
                group.append(p)
        everyone = [r] + killed + living
        for p in killed + living:
            p.send("go")
        self.wait_until("every sender to deliver 500 messages",
                        lambda: all(self.counts(r).get(p.name[:2], 0) >= 500
                                    for p in killed + living),
                        STEP_TIMEOUT, self.diag_of(*everyone))
        for p in killed:
            self.kill9(p)
        at_kill = self.counts(r)
        itlib.log(f"senders {[p.name for p in killed]} killed; receiver counts {at_kill}")
        everyone = [r] + living
        self.wait_until("the surviving senders' traffic to keep flowing (2000 more each)",
                        lambda: all(self.counts(r).get(p.name[:2], 0) >=
                                    at_kill.get(p.name[:2], 0) + 2000 for p in living),
                        STEP_TIMEOUT, self.diag_of(*everyone))
        # New senders on the dead senders' addresses.
        newcomers = []
        for i, h in enumerate(sender_hosts):
            p = self.start(f"N{i}{h.name}", h, ["send", "--bind", f"{h.ip}:{7200 + i}",
                                               "--dest", raddr, "--tag", f"N{i}",
                                               "--size", 1000, "--count", 2000])
            line = p.expect(("bound", "bind-error"), 20)
            self.assertTrue(line.startswith("bound"),
                            f"the killed sender's address is not free: {line}\n{p.diag()}")
            newcomers.append(p)
            p.send("go")
        everyone += newcomers
        for p in newcomers:
            st = itlib.kv_fields(p.expect("stopped", STEP_TIMEOUT))
            self.assertEqual(st["ok"], "2000", f"{p.name}: {st}\n{p.diag()}")
        final = {}
        for p in living:
            p.send("stop")
            final[p.name[:2]] = itlib.kv_fields(p.expect("stopped", STEP_TIMEOUT))
        want = {p.name[:2]: int(final[p.name[:2]]["completed"]) for p in living}
        want.update({p.name[:2]: 2000 for p in newcomers})
        try:
            self.wait_until("the receiver to get every message of the living and new senders",
                            lambda: all(self.counts(r).get(t, 0) >= n for t, n in want.items()),
                            STEP_TIMEOUT, self.diag_of(*everyone))
        except AssertionError:
            pass  # the exact check below says what is missing
        time.sleep(0.3)
        runs = self.runs(r)
        problems = []
        for tag, n in sorted(want.items()):
            got = runs.get(tag, (None, []))[1]
            errors = final.get(tag, {}).get("errors", "none")
            if errors != "none":
                problems.append(f"{tag}: sendto failed: {final[tag]}")
            if got != [(0, n - 1)]:
                problems.append(f"{tag}: expected exactly 0-{n - 1}, received runs "
                                f"{got[:8]}{' ...' if len(got) > 8 else ''}")
        for p in killed:
            tag = p.name[:2]
            got = runs.get(tag, (None, []))[1]
            if len(got) != 1 or got[0][0] != 0:
                problems.append(f"{tag} (killed): expected a gap-free prefix 0..k, received "
                                f"runs {got[:8]}")
            else:
                itlib.log(f"{tag} (killed): received its messages 0..{got[0][1]}")
        if problems:
            self.fail("\n".join(problems) + "\n" + self.diag_of(*everyone)())
        for p in everyone:
            p.send("quit")
        for p in everyone:
            self.assertEqual(p.wait(10), 0, p.diag())

    def test_sender_killed_same_host(self):
        h = self.same_host("ss")
        self.sender_killed(h, [h])

    def test_sender_killed_other_namespace(self):
        a, b = self.two_hosts("s")
        self.sender_killed(b, [a, b])


if __name__ == "__main__":
    itlib.run_tests(limit_seconds=120)
