#!/usr/bin/env python3
"""The RDS module's files as programs probe them (issue 22 point 2): on a host without the
module, a preloaded program sees /sys/module/rds, /sys/module/rds_tcp and /proc/sys/net/rds/*
holding its settings (preload/module_paths.cc); without the shim they do not exist.

py_module_view.py checks them from CPython (stat, listdir, open, access); a shell reads them with
test and cat; the C replay of rds-stress reads pf_rds/sol_rds (absent upstream: its defaults).
Expected run time: ~2 s.
"""

import os
import subprocess
import sys
import unittest

import itlib

ENV = {"RDS_PRELOAD_PING_ENABLE": "0", "RDS_PRELOAD_RECONNECT_MIN_DELAY_MS": "7"}


class ModuleView(unittest.TestCase):
    def setUp(self):
        if os.path.exists("/sys/module/rds") or os.path.exists("/proc/sys/net/rds"):
            self.skipTest("this host has the RDS module loaded: its own files are shown")

    def test_python_sees_the_module(self):
        rundir = itlib.make_tmpdir("module-view")
        p = itlib.Proc("py-view", [sys.executable, itlib.script("py_module_view.py")], rundir,
                       extra_env=ENV)
        p.close_stdin()
        rc = p.wait(30)
        itlib.log("\n".join(p.lines))
        fails = [l for l in p.lines if l.startswith("FAIL")]
        self.assertEqual(fails, [], p.diag())
        self.assertGreaterEqual(len([l for l in p.lines if l.startswith("ok")]), 15, p.diag())
        self.assertEqual(rc, 0, p.diag())

    def test_shell_and_without_the_shim(self):
        rundir = itlib.make_tmpdir("module-view-sh")
        script = "test -d /sys/module/rds && cat /proc/sys/net/rds/max_unacked_packets"
        env = itlib.preload_env(rundir, **ENV)
        r = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env,
                           timeout=20)
        self.assertEqual((r.returncode, r.stdout), (0, "8\n"), r.stderr)
        r = subprocess.run(["sh", "-c", script], capture_output=True, text=True,
                           env=itlib.plain_env(), timeout=20)
        self.assertNotEqual(r.returncode, 0, "without the shim the module's files must be absent")


if __name__ == "__main__":
    itlib.run_tests(limit_seconds=60)
