#!/usr/bin/env python3
"""rds-bench (tools/rds_bench.cc, issue 6) runs briefly and produces sane output.

Not a performance test: the numbers are only checked for consistency, never against targets.
1. A short run (0.1 s per measurement; 64 B and 64 KiB latency, 64 B latency with poll() and
   with epoll_wait() before every receive, 64 B and 1 MiB rate) on the same host, and across two
   network-namespace hosts when root (else that placement is skipped by the bench, which must
   say so), each in the three CPU placements (split, same, none: the default).
2. Exit status 0; the congestion control measured, the summary table and the target lines of
   issues 6 and 19 are printed.
3. The CSV has one row per (test, placement, cpus, transport, size), with p50 > 0 and p99 >= p50
   for latency, latency-poll and latency-epoll, rate > 0 and MB/s = rate x size for rate (and for
   1 MiB a stall share between 0 and 100 %, printed and in the CSV; none for 64 B), CPU time per
   round trip or message > 0; the Unix SOCK_SEQPACKET baseline on the same host up to 64 KiB
   only; and the idle row (200 bound sockets).
4. The scale measurement, small (200 hub sockets, 4 peer processes, same host): every echo of
   both sweeps came back intact (2 x 200), the CSV row has its timings, and the hub has exactly
   one link to each peer engine (an invariant of DESIGN.md §3.2, not a performance number).
5. With gnuplot installed (scripts/deps.sh installs gnuplot-nox) the PNG is written and is a
   PNG.
6. --trials 3 (64 B, same host, 0.1 s each): the shim and TCP alternate in order trial by
   trial, the CSV has a row per trial, and the summary's ratio and range are the median,
   minimum and maximum of the per-trial ratios computed from that CSV.

Skipped in sanitizer builds (the bench re-executes itself under the preload library, which in
those builds needs its sanitizer runtime ahead of it; the suite's other tests cover the library).
Expected run time: ~40 s as root (the scale part well under 1 s).
"""

import csv
import os
import re
import subprocess
import sys
import tempfile
import unittest

import itlib

BENCH = os.path.join(itlib.BUILD_DIR, "tools", "rds-bench")
CPUS = ("split", "same", "none")


class Bench(unittest.TestCase):
    def test_short_run_produces_consistent_csv_and_plot(self):
        if itlib.sanitizer_build():
            self.skipTest("sanitizer build: rds-bench is checked in the normal build")
        bench = os.environ.get("RDS_BENCH", BENCH)
        if not os.path.exists(bench):
            self.skipTest(f"{bench} not built")
        root = os.geteuid() == 0 and subprocess.run(
            ["ip", "netns", "list"], capture_output=True).returncode == 0
        placements = ["host", "netns"] if root else ["host"]
        with tempfile.TemporaryDirectory(prefix="rds-bench-test-") as tmp:
            csv_path = os.path.join(tmp, "out.csv")
            png_path = os.path.join(tmp, "out.png")
            argv = [bench, "--preload", itlib.path_of("RDS_IT_PRELOAD_LIB"), "--seconds", "0.1",
                    "--lat-sizes", "64,64K", "--rate-sizes", "64,1M",
                    "--placements", ",".join(placements), "--idle-sockets", "200",
                    "--scale-sockets", "200", "--scale-peers", "4",
                    "--csv", csv_path, "--plot", png_path]
            r = subprocess.run(argv, capture_output=True, text=True, timeout=240,
                               env=itlib.plain_env())
            itlib.log(r.stdout[-3000:])
            self.assertEqual(r.returncode, 0, f"rds-bench failed:\n{r.stdout}\n{r.stderr}")
            self.assertIn("issue 6 targets:", r.stdout)
            self.assertRegex(r.stdout, r"(?m)^tcp congestion control: \S+",
                             "the bench must say which congestion control it measured")
            self.assertIn("64 B RTT <= 1.2x raw TCP (host split)", r.stdout)
            self.assertIn("issue 19 targets (same host, every CPU placement):", r.stdout)
            for cpus in CPUS:
                self.assertIn(f"64 B latency-epoll RTT <= 1.5x Unix SOCK_SEQPACKET (host {cpus})",
                              r.stdout)
                self.assertIn(f"64 B one-way CPU per message <= raw TCP's (host {cpus})", r.stdout)

            with open(csv_path) as f:
                rows = list(csv.DictReader(f))
            seen = {(x["test"], x["placement"], x["cpus"], x["transport"], int(x["size"])): x
                    for x in rows}
            self.assertEqual(len(seen), len(rows), "one CSV row per measurement")
            expected = 0
            for pl, cpus in [(pl, cpus) for pl in placements for cpus in CPUS]:
                # The Unix baseline: one host, records up to 64 KiB.
                for tr in ("rds", "tcp", "unix"):
                    def fits(size):
                        return tr != "unix" or (pl == "host" and size <= 65536)
                    for size in (64, 65536):
                        row = seen.get(("latency", pl, cpus, tr, size))
                        if not fits(size):
                            self.assertIsNone(row, f"unexpected latency row {pl} {cpus} {tr}")
                            continue
                        expected += 1
                        self.assertIsNotNone(row, f"no latency row {pl} {cpus} {tr} {size}")
                        p50, p99 = float(row["p50_us"]), float(row["p99_us"])
                        self.assertGreater(p50, 0)
                        self.assertGreaterEqual(p99, p50)
                        self.assertGreater(int(float(row["count"])), 10)
                        self.assertGreater(float(row["cpu_us_per_rtt"]), 0)
                    # The ping-pong waiting in poll() or epoll_wait(): under the shim a blocked
                    # wait drives the engine (DESIGN.md §2.3); the exchange must work the same.
                    for test in ("latency-poll", "latency-epoll"):
                        row = seen.get((test, pl, cpus, tr, 64))
                        if not fits(64):
                            self.assertIsNone(row)
                            continue
                        expected += 1
                        self.assertIsNotNone(row, f"no {test} row {pl} {cpus} {tr}")
                        self.assertGreater(float(row["p50_us"]), 0)
                        self.assertGreaterEqual(float(row["p99_us"]), float(row["p50_us"]))
                        self.assertGreater(int(float(row["count"])), 10)
                    for size in (64, 1 << 20):
                        row = seen.get(("rate", pl, cpus, tr, size))
                        if not fits(size):
                            self.assertIsNone(row, f"unexpected rate row {pl} {cpus} {tr} {size}")
                            continue
                        expected += 1
                        self.assertIsNotNone(row, f"no rate row {pl} {cpus} {tr} {size}")
                        rate, mbs = float(row["msg_per_s"]), float(row["mb_per_s"])
                        self.assertGreater(rate, 0)
                        self.assertAlmostEqual(mbs, rate * size / 1e6, delta=0.01 * mbs + 0.01)
                        self.assertGreater(float(row["cpu_us_per_msg"]), 0)
                        # Stalls (gaps of 1 ms or more) are timed for large messages only.
                        if size >= 65536:
                            self.assertGreaterEqual(float(row["stalled_pct"]), 0)
                            self.assertLessEqual(float(row["stalled_pct"]), 100)
                        else:
                            self.assertEqual(row["stalled_pct"], "")
                self.assertRegex(r.stdout, rf"(?m)^rate {pl} {cpus} rds 1 MiB \.\.\. \d+ msg/s, "
                                 r"[\d.]+ MB/s, [\d.]+ us CPU per message, stalled \d+% of the "
                                 r"time \(gaps >= 1 ms\)$")
            idle = seen.get(("idle", "host", "none", "rds", 200))
            self.assertIsNotNone(idle, "no idle row")
            self.assertGreaterEqual(float(idle["rss_kib_per_socket"]), 0)
            self.assertGreaterEqual(float(idle["idle_cpu_pct"]), 0)
            self.assertLess(float(idle["idle_cpu_pct"]), 100)
            self.assertIn("idle process: < 1% CPU and < 4 KiB per socket", r.stdout)

            scale = seen.get(("scale", "host", "none", "rds", 200))
            self.assertIsNotNone(scale, "no scale row")
            self.assertEqual(int(float(scale["peers"])), 4)
            self.assertEqual(int(float(scale["failed"])), 0)
            self.assertEqual(int(float(scale["count"])), 2 * 200)  # two sweeps, all echoed
            self.assertGreater(float(scale["first_sweep_s"]), 0)
            self.assertGreater(float(scale["sweep_s"]), 0)
            self.assertAlmostEqual(float(scale["msg_per_s"]), 200 / float(scale["sweep_s"]),
                                   delta=0.01 * float(scale["msg_per_s"]))
            self.assertEqual(int(float(scale["peers_linked"])), 4)
            self.assertEqual(int(float(scale["max_links_per_peer"])), 1)
            self.assertGreaterEqual(int(float(scale["hub_fds"])), 200)
            self.assertIn("scale: 10,000 sockets in one process and 64 peer processes work",
                          r.stdout)
            self.assertEqual(len(rows), expected + 2)

            if subprocess.run(["sh", "-c", "command -v gnuplot"],
                              capture_output=True).returncode == 0:
                with open(png_path, "rb") as f:
                    self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
            else:
                self.assertIn("gnuplot not found", r.stderr)

    def test_trials_give_medians_of_alternating_side_by_side_runs(self):
        """--trials 3: every measurement three times, shim and TCP alternating in order; the
        CSV keeps each trial, the summary's ratio is the median of the per-trial ratios and
        its range their minimum and maximum."""
        if itlib.sanitizer_build():
            self.skipTest("sanitizer build: rds-bench is checked in the normal build")
        bench = os.environ.get("RDS_BENCH", BENCH)
        if not os.path.exists(bench):
            self.skipTest(f"{bench} not built")
        with tempfile.TemporaryDirectory(prefix="rds-bench-test-") as tmp:
            csv_path = os.path.join(tmp, "out.csv")
            argv = [bench, "--preload", itlib.path_of("RDS_IT_PRELOAD_LIB"), "--seconds", "0.1",
                    "--trials", "3", "--lat-sizes", "64", "--rate-sizes", "64",
                    "--poll-lat-sizes", "", "--placements", "host", "--cpus", "split",
                    "--transports", "rds,tcp", "--idle-sockets", "0",
                    "--scale-sockets", "0", "--csv", csv_path, "--plot", ""]
            r = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                               env=itlib.plain_env())
            itlib.log(r.stdout[-3000:])
            self.assertEqual(r.returncode, 0, f"rds-bench failed:\n{r.stdout}\n{r.stderr}")
            progress = re.findall(
                r"(?m)^(latency|rate) host split (rds|tcp) 64 B trial (\d)/3 \.\.\. ", r.stdout)
            self.assertEqual([(t, tr, int(k)) for t, tr, k in progress],
                             [(t, tr, k) for t in ("latency", "rate")
                              for k, order in ((1, ("rds", "tcp")), (2, ("tcp", "rds")),
                                               (3, ("rds", "tcp")))
                              for tr in order])
            with open(csv_path) as f:
                rows = list(csv.DictReader(f))
            self.assertEqual(len(rows), 2 * 2 * 3)
            by = {(x["test"], x["transport"], int(x["trial"])): x for x in rows}
            self.assertEqual(len(by), 12, "one CSV row per test, transport and trial")
            for test, key in (("latency", "p50_us"), ("rate", "msg_per_s")):
                ratios = sorted(float(by[(test, "rds", k)][key]) / float(by[(test, "tcp", k)][key])
                                for k in range(3))
                line = re.search(rf"(?m)^{test} +host split +64 B .*$", r.stdout)
                self.assertIsNotNone(line, f"no summary line for {test}")
                cells = line.group(0).split()
                self.assertAlmostEqual(float(cells[-2]), ratios[1], delta=0.006, msg=line.group(0))
                lo, hi = map(float, cells[-1].split("-"))
                self.assertAlmostEqual(lo, ratios[0], delta=0.006, msg=line.group(0))
                self.assertAlmostEqual(hi, ratios[2], delta=0.006, msg=line.group(0))
            self.assertIn("issue 6 targets (medians over the trials):", r.stdout)
            self.assertRegex(r.stdout, r"64 B RTT <= 1\.2x raw TCP \(host split\) +(MET|MISS) +"
                                       r"[0-9.]+x \(median of 3 trials, [0-9.]+-[0-9.]+x\)")


if __name__ == "__main__":
    itlib.watchdog(280)
    unittest.main(verbosity=2)
