#!/usr/bin/env python3
"""Command-line conventions of every installed tool (issue 22): rdsctl, rdsrun, rds-bench,
rds-soak and rds-pingpong (tools/tool_flags.h).

For each tool:
* --help and -h exit 0 and print the same text to stdout (nothing to stderr): a usage line
  naming the tool, then an option list naming exactly the options the tool accepts (TOOLS
  below) and -h, --help, --version;
* --version exits 0 and prints "<tool> (rds-preload) <version>", the version of project() in
  meson.build;
* an unknown option still fails with the tool's usage status (rdsrun 125, the others 2) and its
  usual message on stderr, nothing on stdout; so does --help=x, which is not --help.
rdsrun: only the options before the command are its own: `rdsrun [--lib LIB] CMD --help
--version -h` and `rdsrun -- CMD --help` pass them to CMD.

Needs neither root nor a running shim process. Expected run time: ~1 s.
"""

import os
import re
import subprocess
import unittest

import itlib

TIMEOUT = 20

# tool: (environment variable overriding its path, exit status of a usage error, its options
# as the help must name them, the usage message of an unknown option).
TOOLS = {
    "rdsctl": ("RDSCTL", 2, ["--json", "--prometheus", "--watch", "--iterations", "--rundir",
                             "--timeout", "--all", "--keep-stale"],
               "rdsctl: unknown option --frobnicate"),
    "rdsrun": ("RDSRUN", 125, ["--lib", "--check", "--force", "--verbose"],
               "rdsrun: unknown option --frobnicate"),
    "rds-bench": ("RDS_BENCH", 2, [
        "--preload", "--seconds", "--trials", "--lat-sizes", "--rate-sizes", "--poll-lat-sizes",
        "--placements", "--cpus", "--transports", "--idle-sockets", "--scale-sockets",
        "--scale-peers", "--scale-wait", "--csv", "--plot", "--tcp-congestion",
        # internal (its worker processes)
        "--worker", "--addr", "--peer", "--port", "--size", "--cpu", "--count", "--peers",
        "--index", "--wait"], "usage: rds-bench"),
    "rds-soak": ("RDS_SOAK", 2, [
        "--preload", "--local-pairs", "--netns-pairs", "--ns-a", "--ip-a", "--ns-b", "--ip-b",
        "--local-addr", "--messages", "--max-size", "--sizes", "--seed", "--base-port",
        "--rundir", "--keep-rundir", "--timeout", "--stall", "--fault-reset-every",
        "--fault-reset-permille", "--fault-cut-permille", "--fault-connect-fail-permille",
        "--fault-connect-delay-ms", "--env", "--quiet", "--blocking-receive",
        # internal (its worker processes)
        "--role", "--bind", "--peer", "--dest", "--pair"], "usage: rds-soak"),
    "rds-pingpong": ("RDS_PINGPONG", 2, ["--preload", "--count", "--port", "--role"],
                     "usage: rds-pingpong"),
}


def tool_path(name):
    var = TOOLS[name][0]
    p = os.environ.get(var) or os.path.join(itlib.build_root(), "tools", name)
    if not os.path.isfile(p):
        raise AssertionError(f"{name} is not built at {p} (or set {var})")
    return p


def project_version():
    with open(os.path.join(itlib.REPO, "meson.build")) as f:
        m = re.search(r"project\(\s*'rds-preload'.*?\bversion\s*:\s*'([^']+)'", f.read(), re.S)
    if not m:
        raise AssertionError("no version in meson.build's project()")
    return m.group(1)


def run(argv, env=None):
    r = subprocess.run([str(a) for a in argv], capture_output=True, text=True,
                       env=env or itlib.plain_env(), timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    return r.returncode, r.stdout, r.stderr


def listed_options(help_text):
    """The option names of the help's option list: the lines after "options:" up to the first
    empty line, each "  NAME[, NAME] [VALUE]  description"."""
    names = set()
    section = help_text.partition("\noptions:\n")[2].partition("\n\n")[0]
    for line in section.splitlines():
        field = line.strip().split("  ")[0]
        names.update(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", field))
    return names


class Cli(unittest.TestCase):
    def test_help(self):
        for name, (_, _, options, _) in TOOLS.items():
            with self.subTest(tool=name):
                rc, out, err = run([tool_path(name), "--help"])
                self.assertEqual(rc, 0, f"{name} --help\nstdout:\n{out}\nstderr:\n{err}")
                self.assertEqual(err, "")
                self.assertRegex(out.splitlines()[0] if out else "",
                                 rf"^usage: {re.escape(name)}( |$)")
                # Exactly the options the tool accepts: none missing, none it no longer takes.
                self.assertEqual(listed_options(out), set(options) | {"-h", "--help", "--version"},
                                 f"{name} --help's option list:\n{out}")
                rc_h, out_h, err_h = run([tool_path(name), "-h"])
                self.assertEqual((rc_h, out_h, err_h), (0, out, ""), f"{name} -h")

    def test_version(self):
        version = project_version()
        for name in TOOLS:
            with self.subTest(tool=name):
                rc, out, err = run([tool_path(name), "--version"])
                self.assertEqual((rc, out, err), (0, f"{name} (rds-preload) {version}\n", ""))

    def test_unknown_option_still_fails(self):
        for name, (_, status, _, message) in TOOLS.items():
            for bad in ("--frobnicate", "--help=x"):
                with self.subTest(tool=name, option=bad):
                    argv = [tool_path(name), bad] + (["/bin/true"] if name == "rdsrun" else [])
                    rc, out, err = run(argv)
                    self.assertEqual(rc, status, f"{name} {bad}\nstdout:\n{out}\nstderr:\n{err}")
                    self.assertEqual(out, "")
                    self.assertIn(message.replace("--frobnicate", bad), err)

    def test_rdsrun_passes_the_commands_options_on(self):
        rundir = itlib.make_tmpdir("cli")
        env = itlib.plain_env(RDS_PRELOAD_RUNDIR=rundir, **itlib.sanitizer_env(["/bin/echo"]))
        runtime = os.environ.get("RDS_IT_PRELOAD_RUNTIME")  # sanitizer builds: goes first
        if runtime:
            env["LD_PRELOAD"] = runtime
        rdsrun = tool_path("rdsrun")
        lib = itlib.path_of("RDS_IT_PRELOAD_LIB")
        for argv in ([rdsrun, "/bin/echo", "x", "--help", "--version", "-h"],
                     [rdsrun, "--lib", lib, "/bin/echo", "x", "--help", "--version", "-h"],
                     [rdsrun, "--", "/bin/echo", "x", "--help", "--version", "-h"]):
            with self.subTest(argv=argv[1:]):
                rc, out, err = run(argv, env)
                self.assertEqual((rc, out), (0, "x --help --version -h\n"), err)


if __name__ == "__main__":
    itlib.run_tests(limit_seconds=50)
