#!/usr/bin/env python3
"""The tests do not depend on where the checkout lives (issue 22): a clone in a directory other
users cannot enter (root's home, a Debian 12 home directory, a `mktemp -d` folder; all 0700).

1. test_other_uid.py passes with the source tree and the build directory reachable only through
   a 0700 directory. Root only (else skipped, 77); skipped in sanitizer builds (the normal build
   checks it, and test_other_uid.py itself runs there).
   A directory from mkdtemp (mode 0700, root's) gets empty mount points src/ and build/; in a
   private mount namespace (`unshare --mount`: the mounts end with its last process, however the
   run ends) the checkout and the build directory are bind-mounted there, and the driver runs
   from <dir>/src, in <dir>/build, with every path of its environment (preload library, helpers,
   sanitizer options) rewritten into <dir>: the same files, reached only through the 0700
   directory. First a control checks that uid 65534 can NOT read the driver's helper script and
   the preload library there, so the setup is as private as the clone of the issue. The driver
   must pass: a skip in there fails this test (it can run here, so a skip would be a symptom).
2. Only test_other_uid.py needs this: every other test runs as root, which the directory's mode
   does not stop, so only a process of another user notices where the checkout is. Checked
   first, with or without root: the test fails when a file of tests/integration,
   tests/conformance or tests/unit switches uid (setpriv, runuser, set*uid(), set*gid()) without
   being listed in SWITCHES_UID with the driver to run here.

The mount points and the 0700 directory are removed with rmdir only, never a recursive removal
(in this namespace they are empty; rmdir would refuse a mounted tree). Expected run time: that of
test_other_uid.py, ~10-20 s.
"""

import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import unittest

import itlib
import test_other_uid

# File (relative to tests/) that runs processes as another uid -> the driver that covers it.
SWITCHES_UID = {
    "integration/test_other_uid.py": "test_other_uid.py",
}
SCANNED = ("integration", "conformance", "unit")
UID_SWITCH = re.compile(r"\bsetpriv\b|\brunuser\b|\bset(?:res|re|e)?[ug]id\s*\(")
INNER_TIMEOUT = 120  # test_other_uid.py's own watchdog is 100 s


class PrivateCheckout(unittest.TestCase):
    def test_drivers_that_switch_uid_from_a_0700_parent(self):
        self.check_uid_switches_are_listed()  # first: it needs neither root nor anything else
        if itlib.sanitizer_build():
            self.skipTest("sanitizer build: checked in the normal build")
        test_other_uid.check_requirements()  # skips where that driver skips (no root, ...)
        for tool in ("unshare", "mount"):
            if not shutil.which(tool):
                self.skipTest(f"needs {tool} (util-linux) for a private mount namespace")
        r = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"],
                           capture_output=True, text=True, timeout=20)
        if r.returncode != 0:
            self.skipTest(f"no private mount namespace here: {r.stderr.strip()}")
        for driver in sorted(set(SWITCHES_UID.values())):
            with self.subTest(driver=driver):
                self.run_from_private_dir(driver)

    # ---------------------------------------------------------------------------------------

    def check_uid_switches_are_listed(self):
        tests_dir = os.path.dirname(itlib.HERE)
        found = set()
        for sub in SCANNED:
            for name in sorted(os.listdir(os.path.join(tests_dir, sub))):
                rel = f"{sub}/{name}"
                if not name.endswith((".py", ".c", ".cc", ".h")) or rel == (
                        "integration/" + os.path.basename(__file__)):
                    continue
                with open(os.path.join(tests_dir, rel), errors="replace") as f:
                    if UID_SWITCH.search(f.read()):
                        found.add(rel)
        unlisted = sorted(found - set(SWITCHES_UID))
        self.assertFalse(unlisted, f"{unlisted} run processes as another uid: add them to "
                         f"SWITCHES_UID in {os.path.basename(__file__)} with the driver to run "
                         f"from a 0700 parent, and give that uid only files it can read "
                         f"(itlib.other_users_dir)")
        stale = sorted(set(SWITCHES_UID) - found)
        self.assertFalse(stale, f"SWITCHES_UID lists {stale}, which no longer switch uid")

    def make_private_dir(self):
        """<0700 dir>, with empty mount points src/ and build/; removed with rmdir only."""
        private = tempfile.mkdtemp(prefix="rds-it-private-")
        points = [os.path.join(private, "src"), os.path.join(private, "build")]

        def remove_private_dir():
            for d in points + [private]:
                try:
                    os.rmdir(d)
                except FileNotFoundError:
                    pass
                except OSError as e:
                    itlib.log(f"left {d}: {e}")

        itlib.CLEANUP.hooks.append(remove_private_dir)
        for d in points:
            os.mkdir(d, 0o755)
        mode = stat.S_IMODE(os.stat(private).st_mode)
        self.assertEqual(mode, 0o700, f"mkdtemp made {private} with mode {oct(mode)}")
        return private

    def run_from_private_dir(self, driver):
        src = os.path.abspath(itlib.REPO)
        build = os.path.abspath(itlib.build_root())
        private = self.make_private_dir()
        p_src, p_build = os.path.join(private, "src"), os.path.join(private, "build")
        mounts = [(os.path.realpath(src), p_src), (os.path.realpath(build), p_build)]
        # Paths of the environment, in the spellings meson may have used; longest first, so that
        # a build directory inside the checkout maps to the build mount.
        renames = sorted({(src, p_src), (os.path.realpath(src), p_src),
                          (build, p_build), (os.path.realpath(build), p_build)},
                         key=lambda r: -len(r[0]))

        def remap(value):
            for old, new in renames:
                value = re.sub(re.escape(old) + r"(?=/|:|$)", lambda _: new, value)
            return value

        env = {k: remap(v) for k, v in os.environ.items()}
        env["RDS_IT_PRELOAD_LIB"] = lib = remap(itlib.path_of("RDS_IT_PRELOAD_LIB"))
        self.assertTrue(lib.startswith(private + "/"),
                        f"RDS_IT_PRELOAD_LIB={lib} is not reached through {private}")
        helper = os.path.join(p_src, "tests", "integration", "seq_peer.py")
        script = "\n".join(
            ["set -e"]
            + [f"mount --bind {shlex.quote(a)} {shlex.quote(b)}" for a, b in mounts]
            + [f"for f in {shlex.quote(helper)} {shlex.quote(lib)}; do",
               f"  if {shlex.join(test_other_uid.AS_OTHER)} test -r \"$f\"; then",
               f"    echo \"control failed: uid {test_other_uid.OTHER_UID} can read $f through "
               f"{private} (mode 0700): this is not a private checkout\" >&2",
               "    exit 3",
               "  fi",
               "done",
               f"cd {shlex.quote(p_build)}",
               'exec "$@"'])
        argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
                sys.executable, os.path.join(p_src, "tests", "integration", driver)]
        itlib.log(f"running {driver} from {p_src} (build {p_build}; {private} is 0700)")
        start = time.monotonic()
        rc, text = self.run_group(argv, env)
        itlib.log(f"--- {driver} (from the 0700 parent), {time.monotonic() - start:.1f} s:\n"
                  f"{text}--- end of {driver}")
        # Its output is above; not repeated here.
        if rc == itlib.EXIT_SKIP:
            self.fail(f"{driver} skipped its tests when run from the 0700 parent {private}, "
                      f"although it can run here")
        self.assertEqual(rc, 0, f"{driver} failed when run from the 0700 parent {private} "
                         f"(exit {rc}); its output is above")

    def run_group(self, argv, env):
        """Runs argv in a process group of its own (the driver and everything it starts);
        returns (exit status, stdout and stderr). On a timeout, or when this driver is stopped,
        the group gets SIGTERM (the driver then cleans up) and, 10 s later, SIGKILL."""
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, env=env, start_new_session=True)
        ended = []

        def end_group():
            if ended:
                return
            if p.poll() is None:
                _killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
            _killpg(p.pid, signal.SIGKILL)  # and whatever it left behind
            p.wait()
            ended.append(True)

        itlib.CLEANUP.hooks.append(end_group)
        note = ""
        try:
            data, _ = p.communicate(timeout=INNER_TIMEOUT)
        except subprocess.TimeoutExpired:
            end_group()
            data, _ = p.communicate()
            note = f"\n*** not finished within {INNER_TIMEOUT} s; stopped\n"
        end_group()
        return p.returncode, data.decode(errors="replace") + note


def _killpg(pgid, sig):
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


if __name__ == "__main__":
    itlib.run_tests(limit_seconds=150)
