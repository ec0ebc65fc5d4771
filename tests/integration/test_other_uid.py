#!/usr/bin/env python3
"""Another user on the same host (DESIGN.md §4.0, local security). Root only (else skipped, 77).

One world-accessible registry directory (mode 1777) shared by a root process and processes
running as uid/gid 65534 (`setpriv --reuid=65534 --regid=65534 --clear-groups`; Debian's
nobody). The RDS programs are seq_peer.py (CPython on socket.AF_RDS under LD_PRELOAD).

1. Ports are one space for every user: the other uid's bind() of the port root holds fails with
   EADDRINUSE; its bind() of a free port succeeds (so the registry is usable by it, and the
   EADDRINUSE is the held port), and root's bind() of that port then fails with EADDRINUSE.
2. Same-host engine links from another uid are refused. Root's receiver R binds 127.0.0.1:P with
   engine logging on (warnings to a file). The other uid
     a. connects to R's engine socket <rundir>/engine-<pid>.sock with a plain AF_UNIX socket
        (other_uid_probe.py, no shim): it must get no answer -- the connection is refused or
        closed by the engine (not left open, not answered);
     b. sends 200 messages to 127.0.0.1:P through the shim: R receives none of them.
   Meanwhile a root sender's 200 messages to R all arrive (R was serving). R's engine must have
   counted the refusals (shim_link_refused, RDS_INFO_COUNTERS, grew by at least 2: the raw
   connection and the shim's link) and logged them (its log names uid 65534).
3. Control: with RDS_PRELOAD_LINK_UIDS=65534 in root's receiver, the other uid's 200 messages
   all arrive, in order -- so what test 2 sees is the uid policy, not a broken set-up.

What uid 65534 runs does not depend on where the checkout lives: its scripts and the preload
library are copies in a temporary directory every user can enter (itlib.other_users_dir), which
also holds the run directories and, in a sanitizer build, where its sanitizer reports go (moved
to the build's report path at the end). The checkout and the build directory may be under a
directory only root can enter (a 0700 home or `mktemp -d` folder); test_private_checkout.py runs
this driver so.

Every process is bounded in time and removed at the end. Expected run time: ~10-20 s.
"""

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import itlib

OTHER_UID = 65534
PORT = 7000
QUIET_S = 3  # how long R must receive nothing from the other uid
AS_OTHER = ["setpriv", f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}", "--clear-groups"]
SANITIZER_OPTIONS = ("ASAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS")


def other_uid_python():
    """A python3 the other uid can run (sys.executable may live under /root)."""
    for cand in (sys.executable, "/usr/bin/python3"):
        if not cand or not os.path.exists(cand):
            continue
        r = subprocess.run(AS_OTHER + ["env", cand, "-c", "import socket; socket.AF_RDS"],
                           capture_output=True, timeout=20, cwd="/")
        if r.returncode == 0:
            return cand
    return None


def check_requirements():
    """The python3 for uid OTHER_UID; SkipTest when these tests cannot run here (also used by
    test_private_checkout.py)."""
    if os.geteuid() != 0:
        raise unittest.SkipTest("needs root (to run a second process as another uid)")
    if not shutil.which("setpriv"):
        raise unittest.SkipTest("needs setpriv (util-linux)")
    py = other_uid_python()
    if not py:
        raise unittest.SkipTest(f"no python3 with AF_RDS that uid {OTHER_UID} can run")
    return py


class OtherUid(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.py = check_requirements()
        # Root's processes run the checkout's files; uid OTHER_UID's run copies that it can read
        # wherever the checkout is (see the module docstring).
        cls.helper = itlib.script("seq_peer.py")
        cls.shared = itlib.other_users_dir("other-uid")
        cls.lib_other, cls.helper_other, cls.probe_other = itlib.share_with_other_users(
            cls.shared, itlib.path_of("RDS_IT_PRELOAD_LIB"), cls.helper,
            itlib.script("other_uid_probe.py"))
        cls.sanitizer_env_other = cls.redirect_sanitizer_reports()
        cls.check_other_uid_can_open()

    @classmethod
    def redirect_sanitizer_reports(cls):
        """Sanitizer builds: the other uid cannot write the build's report files (log_path, see
        tests/meson.build), so its reports go to a directory of the shared one and are moved to
        the build's report path once every process has ended, for the 'sanitizer-reports' test.
        Returns the *_OPTIONS for its processes ({} in a normal build)."""
        env = {}
        moves = {}
        for var in SANITIZER_OPTIONS:
            value = itlib.sanitizer_env(["python3"]).get(var, os.environ.get(var))
            m = re.search(r"(?:^|:)log_path=([^:]+)", value or "")
            if not m:
                continue
            reports = os.path.join(cls.shared, "sanitizer-reports")
            if not os.path.isdir(reports):
                os.mkdir(reports)
                os.chmod(reports, 0o1777)
            prefix = m.group(1)
            moves[os.path.join(reports, os.path.basename(prefix))] = prefix
            env[var] = value.replace(f"log_path={prefix}",
                                     f"log_path={os.path.join(reports, os.path.basename(prefix))}")

        def move_sanitizer_reports():
            for tmp_prefix, prefix in moves.items():
                for path in glob.glob(glob.escape(tmp_prefix) + ".*"):
                    dst = prefix + path[len(tmp_prefix):]
                    shutil.move(path, dst)
                    itlib.log(f"sanitizer report of uid {OTHER_UID}: {dst}")

        if moves:
            itlib.CLEANUP.hooks.append(move_sanitizer_reports)
        return env

    @classmethod
    def check_other_uid_can_open(cls):
        """Fails at once, and plainly, when uid OTHER_UID cannot open what it is given."""
        files = [cls.helper_other, cls.probe_other]
        r = subprocess.run(
            AS_OTHER + ["env", f"LD_PRELOAD={itlib.preload_value(cls.lib_other)}",
                        *[f"{k}={v}" for k, v in cls.sanitizer_env_other.items()], cls.py, "-c",
                        "import sys\nfor p in sys.argv[1:]: open(p).close()", *files],
            capture_output=True, text=True, timeout=20, cwd=cls.shared,
            env=itlib.plain_env(RDS_PRELOAD_RUNDIR=cls.shared))
        if r.returncode != 0 or "cannot be preloaded" in r.stderr:
            raise AssertionError(f"uid {OTHER_UID} cannot open {files} or preload "
                                 f"{cls.lib_other} (exit {r.returncode}):\n{r.stderr}")

    def setUp(self):
        self.rundir = tempfile.mkdtemp(prefix="run-", dir=self.shared)  # removed with it
        os.chmod(self.rundir, 0o1777)
        self.logdir = itlib.make_tmpdir("other-uid-logs")  # root only

    # ---------------------------------------------------------------------------------------

    def as_root(self, name, args, extra_env=None):
        return itlib.Proc(name, [sys.executable, self.helper] + [str(a) for a in args],
                          self.rundir, extra_env=extra_env)

    def as_other(self, name, argv, preload=True):
        """argv (paths in it from self.shared) as uid OTHER_UID, in self.shared."""
        prefix = AS_OTHER + ["env"]
        if preload:
            prefix.append(f"LD_PRELOAD={itlib.preload_value(self.lib_other)}")
        prefix += [f"{k}={v}" for k, v in self.sanitizer_env_other.items()]
        return itlib.Proc(name, prefix + [str(a) for a in argv], self.rundir, preload=False,
                          cwd=self.shared)

    def check_uid(self, proc, uid):
        """The pid is the program itself (setpriv and env exec, they do not fork)."""
        end = time.monotonic() + 5
        while True:
            with open(f"/proc/{proc.pid}/status") as f:
                line = next(l for l in f if l.startswith("Uid:"))
            with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
                cmd = f.read()
            if b".py" in cmd or time.monotonic() > end:
                break
            time.sleep(0.02)  # still setpriv / env
        self.assertIn(b".py", cmd, f"{proc.name}: unexpected process {cmd!r}")
        self.assertEqual(int(line.split()[1]), uid, f"{proc.name} runs as {line.strip()}")

    def counters(self, proc):
        line = itlib.ask(proc, "counters", ("counters ", "counters-error"))
        self.assertTrue(line.startswith("counters "), f"{proc.name}: {line}")
        return {k: int(v) for k, v in itlib.kv_fields(line).items()}

    def count(self, proc, tag):
        return int(itlib.kv_fields(itlib.ask(proc, "count", "count")).get(tag, 0))

    def wait_count(self, proc, tag, n, timeout, diag):
        end = time.monotonic() + timeout
        while self.count(proc, tag) < n:
            if time.monotonic() > end:
                self.fail(f"{proc.name} received {self.count(proc, tag)} of {n} messages tagged "
                          f"{tag} within {timeout} s\n{diag()}")
            time.sleep(0.1)

    def runs_of(self, proc, tag):
        proc.send("runs")
        proc.expect("runs-end", 10)
        for line in reversed(proc.lines):
            if line.startswith(f"runs {tag} "):
                return line.split()[3] if len(line.split()) > 3 else ""
        return None

    # ---------------------------------------------------------------------------------------

    def test_bind_of_a_port_held_by_another_user(self):
        root = self.as_root("root-recv", ["recv", "--bind", f"127.0.0.1:{PORT}"])
        root.expect("bound", 20)
        other = self.as_other("other-bind-held", [self.py, self.helper_other, "recv", "--bind",
                                                  f"127.0.0.1:{PORT}"])
        line = other.expect(("bound", "bind-error"), 20)
        self.assertEqual(line, "bind-error EADDRINUSE",
                         f"uid {OTHER_UID} binding the port root holds\n{other.diag()}")
        free = self.as_other("other-bind-free", [self.py, self.helper_other, "recv", "--bind",
                                                 f"127.0.0.1:{PORT + 1}"])
        line = free.expect(("bound", "bind-error"), 20)
        self.assertTrue(line.startswith("bound"),
                        f"uid {OTHER_UID} cannot bind a free port: {line}\n{free.diag()}")
        self.check_uid(free, OTHER_UID)
        root2 = self.as_root("root-bind-other", ["recv", "--bind", f"127.0.0.1:{PORT + 1}"])
        line = root2.expect(("bound", "bind-error"), 20)
        self.assertEqual(line, "bind-error EADDRINUSE",
                         f"root binding the port uid {OTHER_UID} holds\n{root2.diag()}")
        for p in (root, free):
            p.send("quit")
            self.assertEqual(p.wait(10), 0, p.diag())

    def test_links_from_another_user_are_refused(self):
        log_env = {"RDS_PRELOAD_LOG_LEVEL": "2",
                   "RDS_PRELOAD_LOG_FILE": os.path.join(self.logdir, "root-%p.log")}
        r = self.as_root("root-recv", ["recv", "--bind", f"127.0.0.1:{PORT}"], extra_env=log_env)
        r.expect("bound", 20)
        before = self.counters(r).get("shim_link_refused", 0)
        sock_path = os.path.join(self.rundir, f"engine-{r.pid}.sock")
        self.assertTrue(os.path.exists(sock_path), f"no engine socket {sock_path}")

        # a. A plain AF_UNIX connection to root's engine.
        probe = self.as_other("other-unix-probe", [self.py, self.probe_other, sock_path],
                              preload=False)
        probe.close_stdin()
        self.assertEqual(probe.wait(20), 0, probe.diag())
        outcome = probe.lines[-1] if probe.lines else ""
        itlib.log(f"plain AF_UNIX connect as uid {OTHER_UID}: {outcome} "
                  f"(socket mode {oct(os.stat(sock_path).st_mode & 0o777)})")
        self.assertTrue(outcome.startswith(("connect-failed", "closed-by-peer", "reset-by-peer")),
                        f"the other uid's connection to root's engine was not refused: "
                        f"{outcome}\n{probe.diag()}")

        # b. RDS messages from the other uid through the shim, and from root.
        other = self.as_other("other-sender", [self.py, self.helper_other, "send", "--bind",
                                               f"127.0.0.1:{PORT + 1}", "--dest",
                                               f"127.0.0.1:{PORT}", "--tag", "U", "--count", 200])
        other.expect("bound", 20)
        self.check_uid(other, OTHER_UID)
        other.send("go")
        ctl = self.as_root("root-sender", ["send", "--bind", f"127.0.0.1:{PORT + 2}", "--dest",
                                           f"127.0.0.1:{PORT}", "--tag", "P", "--count", 200])
        ctl.expect("bound", 20)
        ctl.send("go")
        diag = lambda: "\n".join(p.diag() for p in (r, other, ctl))
        self.wait_count(r, "P", 200, 20, diag)
        time.sleep(QUIET_S)
        self.assertEqual(self.count(r, "U"), 0,
                         f"root's receiver got messages from uid {OTHER_UID}\n{diag()}")

        after = self.counters(r).get("shim_link_refused", 0)
        logs = ""
        for path in glob.glob(os.path.join(self.logdir, "root-*.log")):
            with open(path, errors="replace") as f:
                logs += f.read()
        refusals = [l for l in logs.splitlines() if str(OTHER_UID) in l and "refus" in l]
        itlib.log(f"root engine: shim_link_refused {before} -> {after}; log lines naming uid "
                  f"{OTHER_UID}: {len(refusals)}")
        problems = []
        if after - before < 2:
            problems.append(f"shim_link_refused grew by {after - before}, expected >= 2 (the plain "
                            f"AF_UNIX connection, outcome '{outcome}', and the shim's link)")
        if not refusals:
            problems.append(f"root's engine log does not mention a refusal of uid {OTHER_UID}:\n"
                            f"{logs[-2000:]}")
        if problems:
            self.fail("\n".join(problems) + "\n" + diag())
        other.send("quit")
        ctl.send("quit")
        r.send("quit")
        for p in (r, other, ctl):
            self.assertEqual(p.wait(10), 0, p.diag())

    def test_link_uids_admits_the_listed_user(self):
        r = self.as_root("root-recv", ["recv", "--bind", f"127.0.0.1:{PORT}"],
                         extra_env={"RDS_PRELOAD_LINK_UIDS": str(OTHER_UID)})
        r.expect("bound", 20)
        other = self.as_other("other-sender", [self.py, self.helper_other, "send", "--bind",
                                               f"127.0.0.1:{PORT + 1}", "--dest",
                                               f"127.0.0.1:{PORT}", "--tag", "U", "--count", 200])
        other.expect("bound", 20)
        self.check_uid(other, OTHER_UID)
        other.send("go")
        self.wait_count(r, "U", 200, 20, lambda: "\n".join(p.diag() for p in (r, other)))
        self.assertEqual(self.runs_of(r, "U"), "0-199", r.diag())
        other.send("quit")
        r.send("quit")
        for p in (r, other):
            self.assertEqual(p.wait(10), 0, p.diag())


if __name__ == "__main__":
    itlib.run_tests(limit_seconds=100)
