#!/usr/bin/env python3
"""rdsctl against live rds-preload processes.

1. Two hosts (root only; skipped otherwise): namespaces rdsit<tag>c (10.81.R.1) and rdsit<tag>d
   (10.81.R.2) joined by a veth pair. In C, process PA (rdsctl_peer.py, started with the
   non-default RDS_PRELOAD_RECONNECT_MAX_DELAY_MS=777) binds 10.81.R.1:4000 ("sink", never reads)
   and 10.81.R.1:4001 ("echo"). In D, PB binds 10.81.R.2:5000 and sends 3 x 100 bytes to the
   sink and 2 x 50 to echo, which PA reads. Checked:
   * `rdsctl --json` (parsed): both processes, their namespaces (by `ip netns` name, the same for
     the process and its sockets), bound ports, the sink's 3 queued messages / 300 bytes, echo's
     empty queue, the TCP paths between them, recv_queued in PA and send_queued in PB; after PB
     sends one more message the sink holds 4 and PA's recv_queued increased; totals are the sums;
   * the tables (default command, `sockets PID`): the same facts as text;
   * `--prometheus`: every line valid per the text format (HELP/TYPE before the samples, one
     family per block, label escaping, no duplicate series, numeric values), and the expected
     samples (PA's recv_queued counter = the JSON value, the sink's queued messages gauge = 4,
     engine_info's netns label);
   * `rdsctl config PA` shows 777 marked as set, PB shows the default 1000; `config --json`;
   * `--watch=0.2 --iterations=3` refreshes three times; `--watch` ends promptly on SIGINT.
2. Host only (no root needed), private registry directory:
   * a stale engine socket of a dead pid is skipped and removed (kept with --keep-stale);
   * an "engine" that accepts and never answers costs at most --timeout: rdsctl reports it and
     still shows the live process;
   * a process whose command name contains '"' and '\\' is shown with correctly escaped
     Prometheus labels and JSON; one whose name is not UTF-8 is shown with U+FFFD;
   * an unknown pid argument fails with exit status 1; a missing registry directory is not an
     error;
   * the shared-memory arena: a process that sent three 100,000-byte messages to a same-host
     socket that has not read them shows its arena with three blocks lent (JSON and the
     Prometheus gauge); after they are read, no loan and no block is left.

Expected run time: ~10 s.
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import unittest

import itlib

PEER = itlib.script("rdsctl_peer.py")
STEP = 20


rdsctl_path = itlib.rdsctl_path
rdsctl = itlib.rdsctl
rdsctl_json = itlib.rdsctl_json


def engine(doc, pid):
    for e in doc["engines"]:
        if e["pid"] == pid:
            return e
    raise AssertionError(f"pid {pid} not among the engines: {[e['pid'] for e in doc['engines']]}"
                         f"\n{json.dumps(doc, indent=1)[:4000]}")


def sock_bound(e, endpoint):
    for s in e["sockets"]:
        if s["bound"] == endpoint:
            return s
    raise AssertionError(f"pid {e['pid']}: no socket bound to {endpoint}: "
                         f"{[s['bound'] for s in e['sockets']]}")


def wait_json(tc, rundir, cond, what, timeout=10):
    """Polls rdsctl --json until cond(doc) holds (messages take a moment to arrive)."""
    end = time.monotonic() + timeout
    while True:
        doc = rdsctl_json(tc, rundir)
        try:
            if cond(doc):
                return doc
            last = "condition false"
        except (AssertionError, KeyError) as e:
            last = str(e)
        if time.monotonic() > end:
            tc.fail(f"rdsctl never showed {what} within {timeout} s ({last})\n"
                    f"{json.dumps(doc, indent=1)[:6000]}")
        time.sleep(0.1)


# --------------------------------------------------------------------------------------------
# Prometheus text format (0.0.4) checker.

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r"[a-zA-Z_][a-zA-Z0-9_]*"
LVALUE = r'"((?:[^"\\\n]|\\[\\"n])*)"'
VALUE = r"(?:[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|NaN|[-+]Inf)"
SAMPLE_RE = re.compile(rf"^({NAME})(?:\{{(.*)\}})? ({VALUE})(?: -?\d+)?$")
LABEL_RE = re.compile(rf"\s*({LABEL})\s*=\s*{LVALUE}\s*(,|$)")
HELP_RE = re.compile(rf"^# HELP ({NAME})(?: ((?:[^\\\n]|\\[\\n])*))?$")
TYPE_RE = re.compile(rf"^# TYPE ({NAME}) (counter|gauge|histogram|summary|untyped)$")


def unescape(v):
    return re.sub(r"\\(.)", lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), v)


def parse_labels(text):
    labels, pos = {}, 0
    while pos < len(text):
        m = LABEL_RE.match(text, pos)
        if not m:
            raise ValueError(f"bad label syntax at {text[pos:]!r}")
        if m.group(1) in labels:
            raise ValueError(f"label {m.group(1)} repeated")
        labels[m.group(1)] = unescape(m.group(2))
        pos = m.end()
    return labels


def check_prometheus(text):
    """Validates the exposition; returns ({name: type}, [(name, labels, value)]). Raises
    AssertionError listing every problem."""
    problems = []
    types, helps, samples, seen = {}, set(), [], set()
    finished, current = set(), None
    if text and not text.endswith("\n"):
        problems.append("does not end with a newline")
    for n, line in enumerate(text.split("\n")[:-1], 1):
        where = f"line {n}: {line!r}"
        if line.startswith("#"):
            m = HELP_RE.match(line)
            t = TYPE_RE.match(line)
            if line.startswith("# HELP "):
                if not m:
                    problems.append(f"{where}: malformed HELP")
                    continue
                if m.group(1) in helps:
                    problems.append(f"{where}: second HELP for {m.group(1)}")
                helps.add(m.group(1))
                fam = m.group(1)
            elif line.startswith("# TYPE "):
                if not t:
                    problems.append(f"{where}: malformed TYPE")
                    continue
                fam = t.group(1)
                if fam in types:
                    problems.append(f"{where}: second TYPE for {fam}")
                if any(s[0] == fam for s in samples):
                    problems.append(f"{where}: TYPE after samples of {fam}")
                types[fam] = t.group(2)
            else:
                continue  # a plain comment
            if fam != current:
                if fam in finished:
                    problems.append(f"{where}: family {fam} is not contiguous")
                if current:
                    finished.add(current)
                current = fam
            continue
        if not line.strip():
            continue
        m = SAMPLE_RE.match(line)
        if not m:
            problems.append(f"{where}: not a valid sample line")
            continue
        name = m.group(1)
        try:
            labels = parse_labels(m.group(2) or "")
        except ValueError as e:
            problems.append(f"{where}: {e}")
            continue
        if name != current:
            if name in finished:
                problems.append(f"{where}: family {name} is not contiguous")
            if current:
                finished.add(current)
            current = name
        if name not in types:
            problems.append(f"{where}: sample without a TYPE line")
        key = (name, tuple(sorted(labels.items())))
        if key in seen:
            problems.append(f"{where}: duplicate series")
        seen.add(key)
        value = float(m.group(3))
        if types.get(name) == "counter":
            if not name.endswith("_total"):
                problems.append(f"{where}: counter name does not end in _total")
            if value < 0:
                problems.append(f"{where}: negative counter")
        samples.append((name, labels, value))
    if problems:
        raise AssertionError("invalid Prometheus exposition:\n  " + "\n  ".join(problems[:30]))
    return types, samples


def find_samples(samples, name, **labels):
    return [s for s in samples if s[0] == name and all(s[1].get(k) == v for k, v in labels.items())]


# --------------------------------------------------------------------------------------------


class RdsctlTwoHosts(unittest.TestCase):
    def test_two_namespaces(self):
        itlib.require_netns()
        tag = itlib.unique_tag()
        r = int(tag[-3:], 16) % 250 + 1
        ns_c = itlib.add_netns(f"rdsit{tag}c")
        ns_d = itlib.add_netns(f"rdsit{tag}d")
        ip_c, ip_d = f"10.81.{r}.1", f"10.81.{r}.2"
        itlib.add_veth(ns_c, f"rc{tag}c", f"{ip_c}/24", ns_d, f"rc{tag}d", f"{ip_d}/24")
        itlib.wait_addr_ready(ns_c, ip_c)
        itlib.wait_addr_ready(ns_d, ip_d)
        rundir = itlib.make_tmpdir("rdsctl")

        pa = itlib.Proc("PA", [sys.executable, PEER], rundir, netns=ns_c,
                        extra_env={"RDS_PRELOAD_RECONNECT_MAX_DELAY_MS": "777"})
        pb = itlib.Proc("PB", [sys.executable, PEER], rundir, netns=ns_d)
        pid_a = int(pa.expect("ready", STEP).split()[1])
        pid_b = int(pb.expect("ready", STEP).split()[1])
        pa.send(f"bind sink {ip_c} 4000")
        pa.expect("bound sink", STEP)
        pa.send(f"bind echo {ip_c} 4001")
        pa.expect("bound echo", STEP)
        pb.send(f"bind src {ip_d} 5000")
        pb.expect("bound src", STEP)
        pb.send(f"send src {ip_c} 4000 3 100")
        pb.expect("sent src 3", STEP)
        pb.send(f"send src {ip_c} 4001 2 50")
        pb.expect("sent src 2", STEP)
        pa.send("recv echo 2")
        pa.expect("received echo 2", STEP)

        sink_ep, echo_ep, src_ep = f"{ip_c}:4000", f"{ip_c}:4001", f"{ip_d}:5000"

        def three_queued(doc):
            return sock_bound(engine(doc, pid_a), sink_ep)["recv_queue"] == 3

        doc = wait_json(self, rundir, three_queued, "3 messages queued on the sink")
        a, b = engine(doc, pid_a), engine(doc, pid_b)
        self.assertEqual(a["process_netns_name"], ns_c)
        self.assertEqual(b["process_netns_name"], ns_d)
        self.assertNotEqual(a["process_netns"], b["process_netns"])
        sink, echo = sock_bound(a, sink_ep), sock_bound(a, echo_ep)
        src = sock_bound(b, src_ep)
        self.assertEqual(sink["rcv_bytes"], 300)
        self.assertEqual(echo["recv_queue"], 0)
        self.assertEqual(echo["rcv_bytes"], 0)
        for s in (sink, echo):
            self.assertEqual(s["netns"], a["process_netns"])
        self.assertEqual(src["netns"], b["process_netns"])
        self.assertEqual(sink["transport"], "tcp")
        self.assertTrue(any(p["faddr"] == ip_d and p["transport"] == "tcp" and p["peer_pid"] == pid_b
                            for p in a["paths"]), a["paths"])
        self.assertTrue(any(p["faddr"] == ip_c and p["state"] == "up" and p["peer_pid"] == pid_a
                            and p["next_tx_seq"] >= 6 for p in b["paths"]), b["paths"])
        self.assertGreaterEqual(a["counters"]["recv_queued"], 5)
        self.assertGreaterEqual(b["counters"]["send_queued"], 5)
        self.assertEqual(a["config"]["RDS_PRELOAD_RECONNECT_MAX_DELAY_MS"], "777")
        for name in ("recv_queued", "send_queued", "shim_sockets_created"):
            self.assertEqual(doc["totals"]["counters"][name],
                             sum(e["counters"][name] for e in doc["engines"]), name)
        self.assertEqual(doc["totals"]["recv_queue"],
                         sum(s["recv_queue"] for e in doc["engines"] for s in e["sockets"]))
        self.assertEqual(doc["unreachable"], [])
        queued_before = a["counters"]["recv_queued"]

        # One more message: the queue and the counter move.
        pb.send(f"send src {ip_c} 4000 1 100")
        pb.expect("sent src 1", STEP)
        doc = wait_json(self, rundir,
                        lambda d: sock_bound(engine(d, pid_a), sink_ep)["recv_queue"] == 4,
                        "a 4th message queued on the sink")
        a = engine(doc, pid_a)
        self.assertGreater(a["counters"]["recv_queued"], queued_before)
        self.assertEqual(sock_bound(a, sink_ep)["rcv_bytes"], 400)

        # Tables.
        rc, out, err = rdsctl(rundir)
        self.assertEqual(rc, 0, err)
        for text in ("PROCESSES", "SOCKETS", "PATHS", "COUNTERS", str(pid_a), str(pid_b), ns_c,
                     ns_d, sink_ep, echo_ep, src_ep, "recv_queued", "total"):
            self.assertIn(text, out, f"the tables lack {text!r}:\n{out}")
        sink_rows = [l for l in out.splitlines() if sink_ep in l]
        self.assertTrue(sink_rows and "400" in sink_rows[0].split(), f"sink row: {sink_rows}")
        rc, out, err = rdsctl(rundir, "sockets", str(pid_b))
        self.assertEqual(rc, 0, err)
        self.assertIn(src_ep, out)
        self.assertNotIn(sink_ep, out, "`rdsctl sockets PID` shows another process's socket")

        # Prometheus.
        rc, out, err = rdsctl(rundir, "--prometheus")
        self.assertEqual(rc, 0, err)
        types, samples = check_prometheus(out)
        self.assertEqual(types.get("rds_preload_recv_queued_total"), "counter")
        self.assertEqual(types.get("rds_preload_socket_recv_queued_messages"), "gauge")
        got = find_samples(samples, "rds_preload_recv_queued_total", pid=str(pid_a))
        self.assertEqual(len(got), 1, got)
        self.assertGreaterEqual(got[0][2], a["counters"]["recv_queued"])
        self.assertEqual(got[0][1]["comm"], a["comm"])
        got = find_samples(samples, "rds_preload_socket_recv_queued_messages", pid=str(pid_a),
                           bound=sink_ep)
        self.assertEqual([s[2] for s in got], [4.0])
        got = find_samples(samples, "rds_preload_socket_recv_queued_bytes", pid=str(pid_a),
                           bound=sink_ep)
        self.assertEqual([s[2] for s in got], [400.0])
        got = find_samples(samples, "rds_preload_engine_info", pid=str(pid_b))
        self.assertEqual([s[1]["netns"] for s in got], [ns_d])
        self.assertEqual(find_samples(samples, "rds_preload_engines")[0][2], 2.0)
        up = find_samples(samples, "rds_preload_path_up", pid=str(pid_b), faddr=ip_c)
        self.assertEqual([s[2] for s in up], [1.0])

        # rdsctl config.
        rc, out, err = rdsctl(rundir, "config", str(pid_a))
        self.assertEqual(rc, 0, err)
        line = [l for l in out.splitlines() if "RDS_PRELOAD_RECONNECT_MAX_DELAY_MS" in l]
        self.assertEqual(len(line), 1, out)
        self.assertIn("777", line[0].split())
        self.assertIn("(set; default 1000)", line[0])
        self.assertIn("RDS_PRELOAD_TCP_PORT", out)
        self.assertNotIn(f"pid {pid_b}", out)
        rc, out, err = rdsctl(rundir, "config", "--json", str(pid_b))
        self.assertEqual(rc, 0, err)
        cfg = json.loads(out)
        self.assertEqual([c["pid"] for c in cfg], [pid_b])
        self.assertEqual(cfg[0]["config"]["RDS_PRELOAD_RECONNECT_MAX_DELAY_MS"], "1000")
        self.assertEqual(cfg[0]["config"]["RDS_PRELOAD_RUNDIR"], rundir)

        # --watch: bounded by --iterations, and by SIGINT.
        start = time.monotonic()
        rc, out, err = rdsctl(rundir, "--watch=0.2", "--iterations=3", "processes")
        self.assertEqual(rc, 0, err)
        self.assertEqual(len(re.findall(r"^rdsctl \d\d:\d\d:\d\d  every 0.2s", out, re.M)), 3, out)
        # One row per frame (counted as rows: the GEN column is random hex that may contain
        # the pid's digits).
        self.assertEqual(len(re.findall(rf"^{pid_a}\s", out, re.M)), 3, out)
        self.assertLess(time.monotonic() - start, 10)
        env = itlib.plain_env(RDS_PRELOAD_RUNDIR=rundir)
        w = subprocess.Popen([rdsctl_path(), "--watch=0.3"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=env)
        itlib.CLEANUP.procs.append(w)
        first = w.stdout.readline()  # the first refresh has started
        self.assertTrue(first.startswith(b"rdsctl "), first)
        w.send_signal(signal.SIGINT)
        try:
            rc = w.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.fail("rdsctl --watch did not stop within 5 s of SIGINT")
        self.assertEqual(rc, 0)

        itlib.quit_all(self, [pa, pb])


class RdsctlHost(unittest.TestCase):
    def test_engine_with_thousands_of_sockets(self):
        # Its state (about 270 bytes of JSON per socket) is larger than one RDS message
        # (1 MiB): the engine answers in parts, and rdsctl shows every socket.
        rundir = itlib.make_tmpdir("rdsctl-many")
        count = 6000
        pm = itlib.Proc("PM", [sys.executable, PEER], rundir)
        pid_m = int(pm.expect("ready", STEP).split()[1])
        pm.send(f"bindmany {count} 127.0.0.1")
        pm.expect(f"boundmany {count}", 120)
        doc = rdsctl_json(self, rundir, "--timeout=10")
        e = engine(doc, pid_m)
        self.assertNotIn("error", e)
        self.assertEqual(len(e["sockets"]), count)
        self.assertEqual(len({s["bound"] for s in e["sockets"]}), count)
        pm.send("quit")

    def test_shared_arena_loans(self):
        # Same host: PB sends three 100,000-byte messages (carried by reference in PB's shared
        # arena, docs/perf/history.md §9.6) to PA's sink, which does not read them yet. PB's engine shows
        # its arena with three blocks lent; once PA reads them the loans come back.
        rundir = itlib.make_tmpdir("rdsctl-arena")
        pa = itlib.Proc("PA", [sys.executable, PEER], rundir)
        pb = itlib.Proc("PB", [sys.executable, PEER], rundir)
        pid_a = int(pa.expect("ready", STEP).split()[1])
        pid_b = int(pb.expect("ready", STEP).split()[1])
        pa.send("bind sink 127.0.0.1 4000")
        pa.expect("bound sink", STEP)
        pb.send("bind src 127.0.0.1 5000")
        pb.expect("bound src", STEP)
        pb.send("send src 127.0.0.1 4000 3 100000")
        pb.expect("sent src 3", STEP)
        doc = wait_json(self, rundir,
                        lambda d: engine(d, pid_a)["counters"]["shim_shm_payloads_received"] == 3,
                        "PA's three borrowed payloads")
        arena = engine(doc, pid_b)["arena"]
        self.assertEqual(arena["size"], 32 << 20, arena)
        self.assertEqual(arena["loans"], 3, arena)
        self.assertEqual(arena["blocks_in_use"], 3, arena)
        self.assertEqual(arena["bytes_in_use"], 3 * (128 << 10), arena)
        self.assertEqual(engine(doc, pid_b)["counters"]["shim_shm_payloads_sent"], 3)
        self.assertIsNone(engine(doc, pid_a)["arena"], "PA never sent a large payload")
        rc, out, err = rdsctl(rundir, "--prometheus")
        self.assertEqual(rc, 0, err)
        self.assertIn(f'rds_preload_shm_arena_loans{{pid="{pid_b}"', out)
        pa.send("recv sink 3")
        pa.expect("received sink 3", STEP)
        wait_json(self, rundir, lambda d: engine(d, pid_b)["arena"]["loans"] == 0 and
                  engine(d, pid_b)["arena"]["blocks_in_use"] == 0, "the loans given back")
        itlib.quit_all(self, [pa, pb])

    def test_stale_hung_and_escaping(self):
        rundir = itlib.make_tmpdir("rdsctl-host")
        # A hung "engine": alive (our own pid), accepts, never answers.
        hung = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        hung.bind(os.path.join(rundir, f"engine-{os.getpid()}.sock"))
        hung.listen(8)

        pc = itlib.Proc("PC", [sys.executable, PEER], rundir)
        pid_c = int(pc.expect("ready", STEP).split()[1])
        weird = 'we"ird\\c'
        pc.send(f"comm {weird}")
        pc.expect("comm", STEP)
        pc.send("bind one 127.0.0.1 0")
        port = int(pc.expect("bound one", STEP).split()[3])
        # A stale socket: a dead pid (above any pid_max) whose file outlived its listener. Made
        # after PC's engine started serving: an engine prunes such files when it starts
        # (DESIGN.md §4), and this part is about rdsctl's own handling of them.
        time.sleep(0.3)
        dead_pid = 4194304 + 11
        stale = os.path.join(rundir, f"engine-{dead_pid}.sock")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(stale)
        s.close()

        # --keep-stale keeps the file; the hung engine costs at most --timeout.
        start = time.monotonic()
        rc, out, err = rdsctl(rundir, "--json", "--keep-stale", "--timeout=0.7")
        took = time.monotonic() - start
        self.assertEqual(rc, 0, err)
        self.assertLess(took, 5, "rdsctl waited far longer than --timeout for a hung engine")
        self.assertTrue(os.path.exists(stale))
        doc = json.loads(out)
        self.assertEqual([e["pid"] for e in doc["engines"]], [pid_c])
        self.assertEqual([u["pid"] for u in doc["unreachable"]], [os.getpid()], doc["unreachable"])
        self.assertIn(f"pid {os.getpid()} did not answer", err)
        c = engine(doc, pid_c)
        self.assertEqual(c["comm"], weird)
        self.assertEqual(sock_bound(c, f"127.0.0.1:{port}")["recv_queue"], 0)

        # Without --keep-stale the stale file goes; the table still shows the live process.
        rc, out, err = rdsctl(rundir, "--timeout=0.7")
        self.assertEqual(rc, 0, err)
        self.assertFalse(os.path.exists(stale), "the stale engine socket was not removed")
        self.assertIn(f"127.0.0.1:{port}", out)
        self.assertNotIn(str(dead_pid), out + err)
        hung.close()
        os.unlink(os.path.join(rundir, f"engine-{os.getpid()}.sock"))

        # Label escaping with a real, hostile command name.
        rc, out, err = rdsctl(rundir, "--prometheus")
        self.assertEqual(rc, 0, err)
        types, samples = check_prometheus(out)
        self.assertIn('comm="we\\"ird\\\\c"', out)
        got = find_samples(samples, "rds_preload_engine_info", pid=str(pid_c))
        self.assertEqual([x[1]["comm"] for x in got], [weird])
        self.assertEqual(find_samples(samples, "rds_preload_engines_unreachable")[0][2], 0.0)

        # A command name that is not UTF-8 (the engine copies it as bytes): still shown.
        pc.send("commhex " + b"bad\xffname".hex())
        pc.expect("comm", STEP)
        doc = rdsctl_json(self, rundir)
        self.assertEqual(engine(doc, pid_c)["comm"], "bad\ufffdname")
        rc, out, err = rdsctl(rundir, "--prometheus")
        self.assertEqual(rc, 0, err)
        check_prometheus(out)
        self.assertIn('comm="bad\ufffdname"', out)

        # Errors: an unknown pid; a registry directory that does not exist is not one.
        rc, out, err = rdsctl(rundir, "sockets", "999999999")
        self.assertEqual(rc, 1)
        self.assertIn("999999999", err)
        rc, out, err = rdsctl(os.path.join(rundir, "nope"))
        self.assertEqual(rc, 0, err)
        self.assertIn("does not exist", out)
        rc, out, err = rdsctl(rundir, "--json", "--prometheus")
        self.assertEqual(rc, 2)
        rc, out, err = rdsctl(rundir, "--no-such-option")
        self.assertEqual(rc, 2, err)

        itlib.quit_all(self, [pc])


if __name__ == "__main__":
    itlib.run_tests(limit_seconds=100)
