#!/usr/bin/env python3
"""The host registry across processes (DESIGN.md §4).

1. Process 1 binds 127.0.0.1:PORT. Processes 2 and 3 bind the same address and port: both get
   EADDRINUSE (while process 1 is alive). Process 5 binds 127.0.0.2:PORT: allowed (same port,
   another local address).
2. A sender process S sends to 127.0.0.1:PORT; process 1 receives it (the route works).
3. Process 4 starts retrying bind(127.0.0.1:PORT) every 5 ms, each time on a fresh socket; every
   attempt must fail with EADDRINUSE while process 1 lives (any other errno ends it: failure).
   After 200 ms process 1 is killed with SIGKILL; process 4's bind must succeed within 1 s of
   the kill (measured by the driver; process 4 gives up 1.2 s after it started).
4. S (which still has its route to the dead owner) sends again to 127.0.0.1:PORT: the new
   owner, process 4, receives it; verified message by message and with the pair SHA-256.

Expected run time: ~2 s.
"""

import os
import random
import signal
import time
import unittest

import itlib

REBIND_LIMIT_MS = 1000
HEAD_START_MS = 200


class BindRegistry(unittest.TestCase):
    def test_eaddrinuse_then_rebind_after_sigkill(self):
        rundir = itlib.make_tmpdir("registry")
        peer = itlib.path_of("RDS_PEER")
        port = random.randrange(20000, 60000)
        addr = f"127.0.0.1:{port}"
        small = ["--max-size", "65536", "--timeout", "60"]

        p1 = itlib.Proc("P1", [peer, "--bind", addr, "--expect", "3", "--control"] + small, rundir)
        p1.expect("bound", 20)

        for name in ("P2", "P3"):
            p = itlib.Proc(name, [peer, "--bind", addr] + small, rundir)
            line = p.expect(("bind-error", "bound"), 20)
            rc = p.wait(20)
            self.assertTrue(line.startswith("bind-error EADDRINUSE"),
                            f"{name} binding {addr} held by P1: {line!r} (want EADDRINUSE)\n{p.diag()}")
            self.assertEqual(rc, 4, f"{name} exit status\n{p.diag()}")

        p5 = itlib.Proc("P5", [peer, "--bind", f"127.0.0.2:{port}", "--control"] + small, rundir)
        line = p5.expect(("bound", "bind-error"), 20)
        self.assertTrue(line.startswith("bound"),
                        f"127.0.0.2:{port} must be bindable while 127.0.0.1:{port} is taken: {line}")

        s = itlib.Proc("S", [peer, "--bind", "127.0.0.1:0", "--dest", addr, "--count", "3",
                             "--control"] + small, rundir)
        s_addr = s.expect("bound", 20).split()[1]
        p1.send("go")
        s.send("go")
        itlib.wait_all([p1, s], "done", 20)
        itlib.check_pairs(self, [p1, s], [(s_addr, addr)], 3)

        p4 = itlib.Proc("P4", [peer, "--bind", addr, "--bind-on-go", "--bind-retry-ms",
                               str(HEAD_START_MS + REBIND_LIMIT_MS), "--expect", "3", "--control"]
                        + small, rundir)
        p4.expect("ready", 20)
        p4.send("go")
        time.sleep(HEAD_START_MS / 1000)
        t_kill = time.monotonic()
        os.kill(p1.pid, signal.SIGKILL)
        line = p4.expect(("bound", "bind-error"), 10)
        since_kill_ms = (time.monotonic() - t_kill) * 1000
        itlib.log(f"P4: {line} ({since_kill_ms:.0f} ms after SIGKILL as seen by the driver)")
        self.assertTrue(line.startswith("bound"),
                        f"port {addr} not bindable after its owner was SIGKILLed: {line}\n{p4.diag()}")
        self.assertLessEqual(since_kill_ms, REBIND_LIMIT_MS,
                             f"port {addr} became bindable only {since_kill_ms:.0f} ms after SIGKILL")
        attempts = int(line.split()[3])
        self.assertGreaterEqual(attempts, 2, f"P4 bound at its first attempt although P1 was alive "
                                f"for {HEAD_START_MS} ms: {line}")
        self.assertEqual(p1.wait(10), -signal.SIGKILL)

        # The sender's old route pointed at P1; its next messages must reach P4.
        s.send("go")
        try:
            itlib.wait_all([p4, s], "done", 10)
        except AssertionError as e:
            raise AssertionError(f"S's messages to {addr}, sent after P4 re-bound it, did not all "
                                 f"reach P4 (a route still pointing at the killed owner?)\n{e}")
        itlib.check_pairs(self, [p4, s], [(s_addr, addr)], 3)
        itlib.quit_all(self, [s, p4, p5])


if __name__ == "__main__":
    itlib.run_tests(limit_seconds=45)
