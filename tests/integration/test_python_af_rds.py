#!/usr/bin/env python3
"""Unmodified programs on socket.AF_RDS under LD_PRELOAD.

1. py_af_rds_child.py in a child CPython interpreter: bind, sendto, recvfrom, setblocking(0),
   settimeout, select/poll, epoll level- and edge-triggered, socket(fileno=), fromfd, selectors,
   asyncio (see its docstring). Pass: the child reports every check ok and exits 0.
2. fortify_client (C, -O2 -D_FORTIFY_SOURCE=2): recv, recvfrom, read, poll and select through
   __recv_chk, __recvfrom_chk, __read_chk, __poll_chk, __fdelt_chk. The driver first checks with
   nm that the binary really imports those five symbols (otherwise the test would not test them).

Each program runs with its own registry directory. Expected run time: ~3 s.
"""

import shutil
import subprocess
import sys
import unittest

import itlib

CHILD_TIMEOUT = 40
FORTIFY_SYMBOLS = ("__recv_chk", "__recvfrom_chk", "__read_chk", "__poll_chk", "__fdelt_chk")


class PythonAfRds(unittest.TestCase):
    def run_program(self, name, argv, min_checks):
        rundir = itlib.make_tmpdir(name)
        p = itlib.Proc(name, argv, rundir)
        p.close_stdin()
        rc = p.wait(CHILD_TIMEOUT)
        itlib.log(f"--- {name} (exit {rc})\n" + "\n".join(p.lines))
        fails = [l for l in p.lines if l.startswith(("FAIL", "fatal"))]
        oks = [l for l in p.lines if l.startswith("ok ")]
        self.assertEqual(fails, [], f"{name}:\n  " + "\n  ".join(fails) + "\n" + p.diag())
        self.assertGreaterEqual(len(oks), min_checks,
                                f"{name}: only {len(oks)} checks ran (crashed?)\n{p.diag()}")
        self.assertEqual(rc, 0, f"{name} exited {rc}\n{p.diag()}")

    def test_cpython_socket_module(self):
        self.run_program("python-af-rds", [sys.executable, itlib.script("py_af_rds_child.py")],
                         min_checks=40)

    def test_fortified_c_program(self):
        client = itlib.path_of("FORTIFY_CLIENT")
        if shutil.which("nm"):
            out = subprocess.run(["nm", "-D", "--undefined-only", client], capture_output=True,
                                 text=True, timeout=20).stdout
            missing = [s for s in FORTIFY_SYMBOLS if s not in out]
            self.assertEqual(missing, [], f"{client} does not import {missing}: it was not built "
                             "with -O2 -D_FORTIFY_SOURCE=2, so the _chk paths are not exercised")
        else:
            itlib.log("nm not found: not checking the fortified imports")
        self.run_program("fortify-client", [client], min_checks=14)


if __name__ == "__main__":
    itlib.run_tests(limit_seconds=70)
