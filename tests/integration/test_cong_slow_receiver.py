#!/usr/bin/env python3
"""Congestion back-pressure end to end: one slow receiver, four fast senders on two hosts.

Host A = namespace rdsit<tag>a (10.79.R.1/24), host B = rdsit<tag>b (10.79.R.2/24), joined by a
veth pair; each host has its own registry directory, as two machines would.

  R   (A, 10.79.R.1:5000)  rds_peer --io threads, SO_RCVBUF 64 KiB (RDS rcvbuf 64 KiB), sleeps
                           RECV_DELAY_US after every message (--recv-delay-us), samples its own
                           queued bytes before every receive (--rxqueue-stats)
  SA1 (A, :5001) poll      non-blocking: ENOBUFS -> poll (5 ms) -> retry        (Unix link)
  SA2 (A, :5002) threads   blocking: sleeps in sendto while the port is congested (Unix link)
  SB1 (B, :5001) poll      non-blocking, as SA1                                 (TCP over veth)
  SB2 (B, :5002) threads   blocking, as SA2                                     (TCP over veth)

Each sender sends MESSAGES messages (0 B ... 64 KiB, rds_peer's deterministic plan) to R, with
SO_SNDBUF 64 KiB (RDS sndbuf 64 KiB). The volume (about 4 x MESSAGES x 5.7 KiB) is far above what
R can hold within its rcvbuf, so R's port must become congested again and again
(kernel-rds.md §B.2) and the senders must be held back (§A.4 step 10, §B.4).

Checks:
  * every (sender, R) pair delivers exactly MESSAGES messages, in order, with equal SHA-256
    (rds_peer reports the first lost / duplicated / reordered / corrupted message);
  * the non-blocking senders saw ENOBUFS (sendto returned it to the program);
  * the blocking senders blocked: sendto calls that took >= 5 ms, never ENOBUFS/EAGAIN;
  * all senders finish, and the receiver receives everything, within the time limit; the receiver
    really was slow (its run took at least 4 x MESSAGES x RECV_DELAY_US);
  * R's queued bytes, sampled from the receiver side before every receive, went above its rcvbuf
    (so congestion was really reached) and stayed within rcvbuf + one burst per sender, where
    a burst is the sender's RDS sndbuf + 2 maximal messages (the message admitted while below
    sndbuf may overshoot it, §A.4 step 11, and one more may already have passed the congestion
    check, §A.4 step 10). The sample uses getsockopt(SOL_RDS, RDS_INFO_RECV_MESSAGES) if the
    library answers it, otherwise RDS_INFO_COUNTERS (recv_bytes_added_to_sock -
    recv_bytes_freed_fromsock; R has a single socket);
  * R's resident set (VmRSS, read every 50 ms) stays within its pre-traffic value + RSS_SLACK_MIB,
    and the volume sent (reported by the senders) is well above that slack: if the senders
    ignored congestion, R would have to hold it all.

Needs root and `ip netns` (else skipped, exit 77). Expected run time: ~10-15 s.
"""

import os
import random
import re
import threading
import time
import unittest

import itlib

MESSAGES = int(os.environ.get("RDS_IT_SLOW_MESSAGES", "1000"))
RECV_DELAY_US = 1500
RCVBUF = 65536          # SO_RCVBUF as passed; RDS rcvbuf = the same value (kernel stores 2x)
SNDBUF = 65536          # SO_SNDBUF as passed; RDS sndbuf = the same value
MAX_SIZE = 65536
RSS_SLACK_MIB = 12
PEER_TIMEOUT = 60
SLOW_CALL_MS = 5.0

SENDSTATS_RE = re.compile(r"^sendstats calls (\d+) enobufs (\d+) eagain (\d+) slow_calls (\d+) "
                          r"max_ms ([\d.]+) total_ms ([\d.]+) bytes (\d+)$")
RXQUEUE_RE = re.compile(r"^rxqueue method (\S+) max_bytes (\d+) samples (\d+)$")


def vmrss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class RssSampler(threading.Thread):
    def __init__(self, pid, period=0.05):
        super().__init__(daemon=True)
        self.pid, self.period = pid, period
        self.samples = []
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            v = vmrss_kib(self.pid)
            if v is not None:
                self.samples.append((time.monotonic(), v))
            self.stop.wait(self.period)


def last_match(proc, regex):
    for line in reversed(proc.lines):
        m = regex.match(line)
        if m:
            return m
    return None


class SlowReceiverFastSenders(unittest.TestCase):
    def test_slow_receiver_four_senders_two_hosts(self):
        itlib.require_netns()
        peer = itlib.path_of("RDS_PEER")
        tag = itlib.unique_tag()
        r = random.randrange(1, 255)
        ns_a = itlib.add_netns(f"rdsit{tag}a")
        ns_b = itlib.add_netns(f"rdsit{tag}b")
        ip_a, ip_b = f"10.79.{r}.1", f"10.79.{r}.2"
        itlib.add_veth(ns_a, f"rs{tag}a", f"{ip_a}/24", ns_b, f"rs{tag}b", f"{ip_b}/24")
        itlib.wait_addr_ready(ns_a, ip_a)
        itlib.wait_addr_ready(ns_b, ip_b)
        rundir = {ns_a: itlib.make_tmpdir("slow-hostA"), ns_b: itlib.make_tmpdir("slow-hostB")}
        seed = random.randrange(1, 1 << 30)
        itlib.log(f"namespaces {ns_a} {ns_b}, seed {seed}, {MESSAGES} messages per sender")

        raddr = f"{ip_a}:5000"
        receiver = itlib.Proc(
            "R", [peer, "--bind", raddr, "--count", 0, "--expect", 4 * MESSAGES, "--seed", seed,
                  "--io", "threads", "--rcvbuf", RCVBUF, "--max-size", MAX_SIZE,
                  "--recv-delay-us", RECV_DELAY_US, "--rxqueue-stats", "--control",
                  "--timeout", PEER_TIMEOUT],
            rundir[ns_a], netns=ns_a)
        layout = [("SA1", ns_a, f"{ip_a}:5001", "poll"), ("SA2", ns_a, f"{ip_a}:5002", "threads"),
                  ("SB1", ns_b, f"{ip_b}:5001", "poll"), ("SB2", ns_b, f"{ip_b}:5002", "threads")]
        senders = []
        for name, ns, addr, io in layout:
            argv = [peer, "--bind", addr, "--dest", raddr, "--count", MESSAGES, "--expect", 0,
                    "--seed", seed, "--io", io, "--max-size", MAX_SIZE, "--sndbuf", SNDBUF,
                    "--send-stats", "--control", "--timeout", PEER_TIMEOUT]
            senders.append(itlib.Proc(name, argv, rundir[ns], netns=ns))
        everyone = [receiver] + senders
        itlib.wait_all(everyone, "bound", 20)
        with open(f"/proc/{receiver.pid}/comm") as f:
            comm = f.read().strip()
        self.assertEqual(comm, "rds_peer", "the receiver's pid is not the rds_peer process")

        time.sleep(0.2)
        baseline = vmrss_kib(receiver.pid)
        self.assertIsNotNone(baseline, "cannot read the receiver's VmRSS")
        sampler = RssSampler(receiver.pid)
        sampler.start()
        try:
            receiver.send("go")
            t0 = time.monotonic()
            for s in senders:
                s.send("go")
            itlib.wait_all(senders, "done", PEER_TIMEOUT)
            t_senders = time.monotonic() - t0
            receiver.expect("done", PEER_TIMEOUT, fail_on=("error", "fatal", "timeout"))
            t_receiver = time.monotonic() - t0
        finally:
            sampler.stop.set()
            sampler.join(5)
        itlib.log(f"senders done after {t_senders:.2f} s, receiver done after {t_receiver:.2f} s")

        # 1. No loss, no reordering, no corruption on any pair.
        itlib.check_pairs(self, everyone, [(addr, raddr) for (_, _, addr, _) in layout], MESSAGES)

        # 2. Sender-side behaviour.
        volume = 0
        for (name, _, addr, io), s in zip(layout, senders):
            m = last_match(s, SENDSTATS_RE)
            self.assertIsNotNone(m, f"{name}: no sendstats line\n{s.diag()}")
            calls, enobufs, eagain, slow, max_ms, total_ms = (
                int(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4)),
                float(m.group(5)), float(m.group(6)))
            volume += int(m.group(7))
            itlib.log(f"{name} ({io}): {m.group(0)}")
            if io == "poll":
                self.assertGreater(enobufs, 0, f"{name}: a non-blocking sender to a slow receiver "
                                   f"never got ENOBUFS (congestion never reached it)\n{s.diag()}")
            else:
                self.assertEqual((enobufs, eagain), (0, 0),
                                 f"{name}: a blocking sendto returned ENOBUFS/EAGAIN\n{s.diag()}")
                self.assertEqual(calls, MESSAGES, f"{name}: {calls} sendto calls")
                self.assertGreater(slow, 0, f"{name}: no sendto call blocked for {SLOW_CALL_MS} ms"
                                   f" although the receiver was congested\n{s.diag()}")
                self.assertGreaterEqual(max_ms, 2 * SLOW_CALL_MS, f"{name}: longest sendto only "
                                        f"{max_ms} ms\n{s.diag()}")

        # 3. The receiver was really slow, and everybody finished.
        min_receive_s = 4 * MESSAGES * RECV_DELAY_US / 1e6
        self.assertGreaterEqual(t_receiver, min_receive_s * 0.95,
                                f"the receiver finished in {t_receiver:.2f} s: it was not slow")

        # 4. The receiver's queue stayed bounded.
        m = last_match(receiver, RXQUEUE_RE)
        self.assertIsNotNone(m, f"R: no rxqueue line\n{receiver.diag()}")
        method, max_q, samples = m.group(1), int(m.group(2)), int(m.group(3))
        burst = SNDBUF + 2 * MAX_SIZE
        bound = RCVBUF + 4 * burst
        itlib.log(f"R: queued bytes max {max_q} over {samples} samples (method {method}); "
                  f"rcvbuf {RCVBUF}, bound {bound}")
        self.assertGreaterEqual(samples, 4 * MESSAGES, f"R sampled its queue only {samples} times")
        self.assertGreater(max_q, RCVBUF, f"R's queue never went above its rcvbuf ({method}): the "
                           "test did not reach congestion, or the measure is broken")
        self.assertLessEqual(max_q, bound, f"R's queue reached {max_q} bytes, more than rcvbuf "
                             f"{RCVBUF} + 4 bursts of {burst} (method {method})")

        # 5. The receiver's memory stayed bounded.
        peak = max(v for _, v in sampler.samples) if sampler.samples else None
        self.assertIsNotNone(peak, "no VmRSS sample")
        itlib.log(f"R: VmRSS baseline {baseline} KiB, peak {peak} KiB over "
                  f"{len(sampler.samples)} samples; {volume} bytes sent in all")
        self.assertGreater(len(sampler.samples), 10)
        # The bound is meaningful: a receiver that had to hold what was sent would exceed it.
        self.assertGreater(volume, 1.25 * RSS_SLACK_MIB * 1024 * 1024,
                           f"only {volume} bytes were sent: the RSS bound would not catch an "
                           "unbounded receive queue")
        if itlib.sanitizer_build():
            # ASan's quarantine keeps freed memory (up to 256 MiB) and adds redzones: RSS says
            # nothing about queue bounds there. The queue bound above still holds.
            itlib.log("sanitizer build: the VmRSS bound is not checked")
        else:
            self.assertLessEqual(peak - baseline, RSS_SLACK_MIB * 1024,
                                 f"R's VmRSS grew from {baseline} KiB to {peak} KiB")

        # Diagnostics: the library's own view of congestion on each side.
        for p in senders + [receiver]:
            p.send("counters")
            p.expect("counters-end", 10)
            wanted = ("counter cong_", "counter send_queue_full", "counter recv_queued")
            itlib.log(f"{p.name}: " + ", ".join(l[len('counter '):] for l in p.lines
                                                  if l.startswith(wanted)))
        itlib.quit_all(self, everyone)


if __name__ == "__main__":
    itlib.run_tests(limit_seconds=PEER_TIMEOUT + 30)
