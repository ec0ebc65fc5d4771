#!/usr/bin/env python3
"""close() while blocked, and RDS fds across fork() (DESIGN.md §2.4, §7).

(a) close_fork_probe close-wakes / close-dup: a thread blocked in recvmsg is woken with EBADF
    within 2 s when another thread closes the socket's last fd (also with two readers, with
    SO_RCVTIMEO, and when the fd number is reused at once); with a dup still open the reader
    keeps waiting and still receives.
(b) close_fork_probe fork and py_fork_child.py (os.fork in CPython): parent and child share each
    socket as with kernel RDS — the child sends from, receives on and binds the inherited
    sockets, the parent sees the child's bind; close works, a socket the child creates works;
    the parent's sockets keep working after the child exited. (Many processes on one socket:
    test_shared_sockets.py.)

Each probe is a separate process with its own registry directory and a hard timeout.
Expected run time: ~5 s.
"""

import subprocess
import sys
import unittest

import itlib

PROBE_TIMEOUT = 40


class CloseAndFork(unittest.TestCase):
    def run_probe(self, name, argv):
        rundir = itlib.make_tmpdir(name)
        p = itlib.Proc(name, argv, rundir)
        p.close_stdin()
        rc = p.wait(PROBE_TIMEOUT)
        text = "\n".join(p.lines)
        itlib.log(f"--- {name} (exit {rc})\n{text}")
        fails = [l for l in p.lines if l.startswith(("FAIL", "fatal"))]
        self.assertEqual(fails, [], f"{name} failed checks:\n  " + "\n  ".join(fails) + "\n" + p.diag())
        self.assertTrue(any(l.startswith("ok ") for l in p.lines),
                        f"{name}: no check ran (crashed?)\n{p.diag()}")
        self.assertEqual(rc, 0, f"{name} exited {rc}\n{p.diag()}")

    def test_a_close_wakes_blocked_reader(self):
        self.run_probe("close-wakes", [itlib.path_of("CLOSE_FORK_PROBE"), "close-wakes"])

    def test_a_close_with_dup_open(self):
        self.run_probe("close-dup", [itlib.path_of("CLOSE_FORK_PROBE"), "close-dup"])

    def test_b_fork_c(self):
        self.run_probe("fork-c", [itlib.path_of("CLOSE_FORK_PROBE"), "fork"])

    def test_b_fork_python(self):
        self.run_probe("fork-python", [sys.executable, itlib.script("py_fork_child.py")])


if __name__ == "__main__":
    itlib.run_tests(limit_seconds=70)
