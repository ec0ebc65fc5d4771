#!/usr/bin/env python3
"""Run-directory hygiene (issue 22 point 5): no engine-<pid>.sock is left behind.

1. A process that exits (exit, _exit, the end of a Python script) removes its own engine socket
   file, and fork children's exits leave their parent's alone; the file of a process that
   exec'd a program that does not use RDS is pruned by the next processes.
2. The file of a killed process (kill -9) is pruned by the next process that binds an RDS
   socket on the host, without any tool run.
3. The registry folder of a network namespace that was deleted (nobody uses it) is pruned by
   the next process that binds; the folder of a namespace in use stays.

lifetime_probe.c and py_lifetime.py are the programs. Expected run time: ~5 s.
"""

import glob
import os
import signal
import sys
import time
import unittest

import itlib


def probe():
    return itlib.path_of("LIFETIME_PROBE")


def engine_files(rundir):
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(rundir, "engine-*.sock")))


class RunDir(unittest.TestCase):
    def run_to_end(self, name, argv, rundir):
        p = itlib.Proc(name, argv, rundir)
        p.close_stdin()
        rc = p.wait(30)
        self.assertEqual(rc, 0, f"{name} exited {rc}\n{p.diag()}")
        return p

    def test_1_exiting_processes_remove_their_socket(self):
        rundir = itlib.make_tmpdir("rundir-exit")
        # It reads nothing until its standard input ends, so that it is still there below.
        counter = itlib.Proc("counter", [probe(), "count", "127.0.0.1", 4500, 5, 10000, "hold"],
                             rundir)
        counter.expect("ready", 20)
        # exec first: the pid lives on in /bin/true, which cannot remove the file when it ends;
        # the engines of the processes after it prune it.
        for how in ("exec", "close", "exit", "_exit"):
            self.run_to_end(f"send-then-{how}", [probe(), "send-then", how, "127.0.0.1",
                                                 "127.0.0.1", 4500], rundir)
        self.run_to_end("python", [sys.executable, itlib.script("py_lifetime.py"), "send-and-end",
                                   "127.0.0.1", "127.0.0.1", 4500], rundir)
        self.run_to_end("fork-children", [probe(), "fork-sockets", 4], rundir)
        end = time.monotonic() + 5
        while len(engine_files(rundir)) > 1 and time.monotonic() < end:
            time.sleep(0.05)
        left = engine_files(rundir)
        self.assertEqual(left, [f"engine-{counter.pid}.sock"],
                         f"exited processes left their engine socket files: {left}")
        counter.close_stdin()
        self.assertEqual(counter.expect("count", 30), "count 5")
        self.assertEqual(counter.wait(10), 0, counter.diag())
        self.assertEqual(engine_files(rundir), [], "the counter left its engine socket file")

    def test_2_a_killed_process_file_is_pruned(self):
        rundir = itlib.make_tmpdir("rundir-kill")
        victim = itlib.Proc("victim", [probe(), "count", "127.0.0.1", 4600, 1, 60000], rundir)
        victim.expect("ready", 20)
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(10)
        stale = f"engine-{victim.pid}.sock"
        self.assertIn(stale, engine_files(rundir), "a killed process cannot remove its file")
        newcomer = itlib.Proc("newcomer", [probe(), "count", "127.0.0.1", 4601, 1, 60000],
                              rundir)
        newcomer.expect("ready", 20)
        end = time.monotonic() + 5
        while stale in engine_files(rundir) and time.monotonic() < end:
            time.sleep(0.05)
        self.assertNotIn(stale, engine_files(rundir),
                         "the next process on the host did not prune the killed one's file")
        self.assertIn(f"engine-{newcomer.pid}.sock", engine_files(rundir))
        newcomer.p.kill()

    def test_3_folders_of_unused_namespaces_are_pruned(self):
        itlib.require_netns()
        rundir = itlib.make_tmpdir("rundir-ns")
        gone_ns = itlib.add_netns(f"rdsitgone{itlib.unique_tag()}")
        kept_ns = itlib.add_netns(f"rdsitkept{itlib.unique_tag()}")
        # A process that used a namespace that is then deleted, and one still using another.
        keeper = itlib.Proc("kept-user", [probe(), "count", "127.0.0.1", 4701, 1, 60000], rundir,
                            netns=kept_ns)
        keeper.expect("ready", 20)
        user = itlib.Proc("gone-user", [probe(), "count", "127.0.0.1", 4700, 1, 500], rundir,
                          netns=gone_ns)
        user.close_stdin()
        user.expect("count", 20)
        user.wait(10)
        before = sorted(d for d in os.listdir(rundir) if d.startswith("ns-"))
        self.assertEqual(len(before), 2, before)
        itlib.sh("ip", "netns", "del", gone_ns)
        itlib.CLEANUP.netns.remove(gone_ns)
        newcomer = itlib.Proc("newcomer", [probe(), "count", "127.0.0.1", 4702, 1, 60000], rundir)
        newcomer.expect("ready", 20)
        end = time.monotonic() + 5
        while time.monotonic() < end:
            now = sorted(d for d in os.listdir(rundir) if d.startswith("ns-"))
            if len(now) == 2 and not set(before) <= set(now):
                break
            time.sleep(0.05)
        now = sorted(d for d in os.listdir(rundir) if d.startswith("ns-"))
        # The deleted namespace's folder went; the one in use stayed; the newcomer's is there.
        self.assertEqual(len(now), 2, f"before {before}, now {now}")
        self.assertEqual(len(set(before) & set(now)), 1, f"before {before}, now {now}")
        keeper.p.kill()
        newcomer.p.kill()


if __name__ == "__main__":
    itlib.run_tests(limit_seconds=80)
