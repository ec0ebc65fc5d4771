#!/usr/bin/env python3
"""rdsrun: runs programs with the shim, and refuses those the shim cannot be loaded into.

* A statically linked program (tools/meson.build builds rdsrun_static_probe with -static):
  refused with exit status 127 and a message saying why, before it runs; --check says the same;
  --force runs it anyway. A script whose #! interpreter is that static program: refused too.
* A normal program (python3, directly and through a `#!/usr/bin/env python3` script): runs with
  the shim loaded (librds_preload.so in /proc/self/maps, LD_PRELOAD as expected), creates an
  AF_RDS socket and exchanges a message through it.
* LD_PRELOAD entries already there are kept, in front; the shim is not added twice.
* The exit status is the program's own (exit 7; death by SIGTERM); the library is found without
  --lib next to rdsrun, in the build tree and in an installed layout (bin/ + lib/).
* 126 for a command that does not exist, 127 for a missing library, 125 without a command or
  with an unknown option.
* A Go program (an ELF with a .note.go.buildid section, made with objcopy) is refused.
* As root: a set-user-ID program of another user is refused (secure-execution mode), unless its
  file system is mounted nosuid.

Expected run time: ~3 s.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import itlib

TIMEOUT = 30

RDS_CHILD = r"""
import os, socket, sys
lib = sys.argv[1]
maps = open("/proc/self/maps").read()
assert lib in maps, "the shim is not mapped"
s = socket.socket(socket.AF_RDS, socket.SOCK_SEQPACKET, 0)
s.bind(("127.0.0.1", 0))
s.settimeout(10)
s.sendto(b"ping", s.getsockname())
data, src = s.recvfrom(100)
assert data == b"ping", data
print("rds ok", os.environ.get("LD_PRELOAD", ""), flush=True)
"""


def build_root():
    return os.path.dirname(os.path.dirname(itlib.path_of("RDS_IT_PRELOAD_LIB")))


def tool(env_var, *rel):
    p = os.environ.get(env_var) or os.path.join(build_root(), *rel)
    if not os.path.isfile(p):
        raise AssertionError(f"{p} is not built ({env_var})")
    return p


def lib():
    return os.path.realpath(itlib.path_of("RDS_IT_PRELOAD_LIB"))


def other_preloads():
    """What the other drivers preload besides the shim (a sanitizer runtime in a sanitizer
    build, nothing otherwise): kept in front by rdsrun."""
    entries = [e for e in itlib.preload_value().replace(" ", ":").split(":") if e]
    return [e for e in entries if os.path.realpath(e) != lib()]


def run(argv, rundir, ld_preload=None, timeout=TIMEOUT):
    env = itlib.plain_env(RDS_PRELOAD_RUNDIR=rundir, **itlib.sanitizer_env([sys.executable]))
    pre = other_preloads() + ([ld_preload] if ld_preload else [])
    if pre:
        env["LD_PRELOAD"] = ":".join(pre)
    r = subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=env,
                       timeout=timeout)
    return r.returncode, r.stdout, r.stderr


class Rdsrun(unittest.TestCase):
    def setUp(self):
        self.rdsrun = tool("RDSRUN", "tools", "rdsrun")
        self.static = tool("RDSRUN_STATIC_PROBE", "tools", "rdsrun_static_probe")
        self.rundir = itlib.make_tmpdir("rdsrun")
        self.tmp = itlib.make_tmpdir("rdsrun-files")

    def check_refused(self, rc, out, err, words):
        self.assertEqual(rc, 127, f"expected 127\nstdout: {out}\nstderr: {err}")
        self.assertIn("the shim cannot be loaded", err)
        for w in words:
            self.assertIn(w, err)
        self.assertNotIn("static probe ran", out, "the refused program ran")

    def test_static_program_is_refused(self):
        rc, out, err = run([self.rdsrun, "--lib", lib(), self.static], self.rundir)
        self.check_refused(rc, out, err, ["statically linked", self.static])
        rc, out, err = run([self.rdsrun, "--check", self.static], self.rundir)
        self.check_refused(rc, out, err, ["statically linked"])
        rc, out, err = run([self.rdsrun, "--force", self.static], self.rundir)
        self.assertEqual(rc, 0, err)
        self.assertIn("static probe ran", out)
        self.assertIn("--force", err)
        script = os.path.join(self.tmp, "static-script")
        with open(script, "w") as f:
            f.write(f"#!{self.static}\n")
        os.chmod(script, 0o755)
        rc, out, err = run([self.rdsrun, script], self.rundir)
        self.check_refused(rc, out, err, ["is a script for", "statically linked"])

    def test_normal_program_runs_with_the_shim(self):
        rc, out, err = run([self.rdsrun, "--lib", lib(), sys.executable, "-c", RDS_CHILD, lib()],
                           self.rundir)
        self.assertEqual(rc, 0, f"stdout: {out}\nstderr: {err}")
        self.assertIn("rds ok", out)
        preload = out.split("rds ok", 1)[1].split()[0]
        self.assertEqual(preload.split(":"), other_preloads() + [lib()])
        # Through a `#!/usr/bin/env python3` script, found in PATH, library found without --lib.
        script = os.path.join(self.tmp, "rds-script")
        with open(script, "w") as f:
            f.write(f"#!/usr/bin/env {os.path.basename(sys.executable)}\n{RDS_CHILD}")
        os.chmod(script, 0o755)
        env_path = os.path.dirname(sys.executable) + ":" + os.environ.get("PATH", "/usr/bin:/bin")
        old = os.environ.get("PATH")
        os.environ["PATH"] = env_path
        try:
            rc, out, err = run([self.rdsrun, "--verbose", script, lib()], self.rundir)
        finally:
            os.environ["PATH"] = old
        self.assertEqual(rc, 0, f"stdout: {out}\nstderr: {err}")
        self.assertIn("rds ok", out)
        self.assertIn("is a script for", err)  # --verbose: the interpreter was checked

    def test_existing_preload_kept_once(self):
        rc, out, err = run([self.rdsrun, sys.executable, "-c",
                            "import os; print(os.environ['LD_PRELOAD'])"],
                           self.rundir, ld_preload=f"libm.so.6:{lib()}")
        self.assertEqual(rc, 0, err)
        self.assertEqual(out.strip().split(":"), other_preloads() + ["libm.so.6", lib()])

    def test_exit_status_and_library_lookup(self):
        rc, _, err = run([self.rdsrun, sys.executable, "-c", "import sys; sys.exit(7)"], self.rundir)
        self.assertEqual(rc, 7, err)
        rc, _, err = run([self.rdsrun, sys.executable, "-c",
                          "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"], self.rundir)
        self.assertEqual(rc, -15, err)
        # Build tree: build/tools/rdsrun finds build/preload/librds_preload.so.
        rc, out, err = run([self.rdsrun, "--verbose", "--check", "/bin/true"], self.rundir)
        self.assertEqual(rc, 0, err)
        self.assertIn(f"with {lib()}", out)
        # Installed layout: <prefix>/bin/rdsrun and <prefix>/lib/librds_preload.so.
        prefix = os.path.join(self.tmp, "prefix")
        os.makedirs(os.path.join(prefix, "bin"))
        os.makedirs(os.path.join(prefix, "lib"))
        shutil.copy2(self.rdsrun, os.path.join(prefix, "bin", "rdsrun"))
        shutil.copy2(lib(), os.path.join(prefix, "lib", "librds_preload.so"))
        rc, out, err = run([os.path.join(prefix, "bin", "rdsrun"), "--check", "/bin/true"],
                           self.rundir)
        self.assertEqual(rc, 0, err)
        self.assertIn(os.path.join(os.path.realpath(prefix), "lib", "librds_preload.so"), out)

    def test_errors(self):
        rc, _, err = run([self.rdsrun, "no-such-command-rdsrun-test"], self.rundir)
        self.assertEqual(rc, 126, err)
        self.assertIn("not found", err)
        rc, _, err = run([self.rdsrun, "--lib", "/nonexistent/librds_preload.so", "/bin/true"],
                         self.rundir)
        self.assertEqual(rc, 127, err)
        self.assertIn("cannot find", err)
        rc, _, err = run([self.rdsrun], self.rundir)
        self.assertEqual(rc, 125, err)
        rc, _, err = run([self.rdsrun, "--no-such-option", "/bin/true"], self.rundir)
        self.assertEqual(rc, 125, err)
        self.assertIn("unknown option", err)

    def test_go_program_is_refused(self):
        objcopy = shutil.which("objcopy")
        if not objcopy:
            self.skipTest("objcopy (binutils) is needed to make a Go-looking ELF")
        note = os.path.join(self.tmp, "buildid")
        with open(note, "wb") as f:
            f.write(b"\x04\x00\x00\x00\x08\x00\x00\x00\x04\x00\x00\x00Go\x00\x00fakebuild")
        fake = os.path.join(self.tmp, "fakego")
        itlib.sh(objcopy, "--add-section", f".note.go.buildid={note}", "/bin/true", fake)
        os.chmod(fake, 0o755)
        rc, out, err = run([self.rdsrun, "--check", fake], self.rundir)
        self.check_refused(rc, out, err, ["Go program"])

    def test_setuid_program_is_refused(self):
        if os.geteuid() != 0:
            self.skipTest("needs root to make a set-user-ID file of another user")
        d = tempfile.mkdtemp(prefix="rdsrun-suid-", dir=self.tmp)
        os.chmod(d, 0o755)
        prog = os.path.join(d, "suid-true")
        shutil.copy2("/bin/true", prog)
        os.chown(prog, 65534, -1)
        os.chmod(prog, 0o4755)
        rc, out, err = run([self.rdsrun, "--check", prog], self.rundir)
        if os.statvfs(prog).f_flag & os.ST_NOSUID:
            self.assertEqual(rc, 0, f"on a nosuid file system the bit has no effect: {err}")
        else:
            self.check_refused(rc, out, err, ["set-user-ID", "secure-execution"])


if __name__ == "__main__":
    itlib.run_tests(limit_seconds=80)
