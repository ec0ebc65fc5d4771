"""Shared helpers of the integration drivers (Python 3 standard library only).

Every driver:
  * starts its helper programs under LD_PRELOAD=$RDS_IT_PRELOAD_LIB with a private
    RDS_PRELOAD_RUNDIR (a fresh temporary directory),
  * runs TCP tests inside network namespaces created for this run only,
  * is bounded in time (a SIGALRM watchdog plus per-step timeouts) and cleans up what it
    started (children, namespaces, temporary directories) on success, failure, timeout,
    SIGTERM and SIGINT,
  * exits 0 when every test passed, 77 when every test was skipped (meson: SKIP), 1 otherwise.

Paths come from the environment set by tests/integration/meson.build; when a variable is
missing (a driver run by hand), they are looked for in BUILD_DIR: the current directory when it
is a meson build directory of this checkout (`cd build-x && python3 ../tests/integration/...`),
else ./build.

Nothing may depend on where the checkout lives: a process that runs as another user is given
no path into the checkout or the build directory, which may be under a directory only root can
enter; see other_users_dir.
"""

import atexit
import errno
import json
import os
import itertools
import random
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
EXIT_SKIP = 77


def _default_build_dir():
    """The current directory when it is a meson build directory of this checkout, else ./build."""
    try:
        cwd = os.getcwd()
        with open(os.path.join(cwd, "meson-info", "meson-info.json")) as f:
            source = json.load(f)["directories"]["source"]
        if os.path.realpath(source) == os.path.realpath(REPO):
            return cwd
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return os.path.join(REPO, "build")


BUILD_DIR = _default_build_dir()

_DEFAULTS = {
    "RDS_IT_PRELOAD_LIB": os.path.join(BUILD_DIR, "preload", "librds_preload.so"),
    "RDS_PEER": os.path.join(BUILD_DIR, "tests", "integration", "rds_peer"),
    "CLOSE_FORK_PROBE": os.path.join(BUILD_DIR, "tests", "integration", "close_fork_probe"),
    "LIFETIME_PROBE": os.path.join(BUILD_DIR, "tests", "integration", "lifetime_probe"),
    "BAD_INPUT_PROBE": os.path.join(BUILD_DIR, "tests", "integration", "bad_input_probe"),
    "FORTIFY_CLIENT": os.path.join(BUILD_DIR, "tests", "integration", "fortify_client"),
}


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def path_of(var):
    """Path of the preload library or of a built helper; fails the test when it is missing."""
    p = os.environ.get(var) or _DEFAULTS[var]
    if not os.path.isfile(p):
        raise AssertionError(f"{var}={p} does not exist (build the project, or set {var})")
    return os.path.abspath(p)


def script(name):
    return os.path.join(HERE, name)


_tag_counter = itertools.count(random.randrange(16 ** 3))


def unique_tag():
    """Short and unique: used for namespace and interface names (IFNAMSIZ is 16). The pid
    keeps concurrent drivers apart, a per-process counter keeps one driver's calls apart (a
    random draw collided in CI), and a tag some namespace already starts with (left behind by
    an earlier driver that had the same pid) is skipped."""
    existing = os.listdir("/run/netns") if os.path.isdir("/run/netns") else []
    while True:
        tag = f"{os.getpid() % 100000:05d}{next(_tag_counter) % 16 ** 3:03x}"
        if not any(name.startswith(f"rdsit{tag}") or name.startswith(f"rdsitprobe{tag}")
                   for name in existing):
            return tag


# --------------------------------------------------------------------------------------------
# Cleanup of everything a test started, whatever happens.

class _Cleanup:
    def __init__(self):
        self.procs = []
        self.netns = []
        self.hooks = []  # functions run once every process has ended, before dirs are removed
        self.dirs = []
        self.done = False

    def run(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    p.kill()
                except OSError:
                    pass
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except Exception:
                pass
        self.procs.clear()
        hooks, self.hooks = self.hooks, []
        for hook in reversed(hooks):
            try:
                hook()
            except Exception as e:  # the rest of the cleanup must still run
                log(f"cleanup: {getattr(hook, '__name__', hook)}: {e!r}")
        for ns in reversed(self.netns):
            subprocess.run(["ip", "netns", "del", ns], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=20)
        self.netns.clear()
        if os.environ.get("RDS_IT_KEEP_TMP"):
            for d in self.dirs:
                log(f"kept {d}")
        else:
            for d in self.dirs:
                shutil.rmtree(d, ignore_errors=True)
        self.dirs.clear()


CLEANUP = _Cleanup()
atexit.register(CLEANUP.run)


def _fatal_signal(signum, frame):
    log(f"*** {signal.Signals(signum).name}: cleaning up and failing")
    CLEANUP.run()
    os._exit(1)


signal.signal(signal.SIGTERM, _fatal_signal)
signal.signal(signal.SIGINT, _fatal_signal)


def watchdog(seconds):
    """Whole-driver time limit: on expiry print, clean up and exit 1."""
    def expired(signum, frame):
        log(f"*** TIMEOUT: the driver exceeded its {seconds} s limit")
        CLEANUP.run()
        os._exit(1)
    signal.signal(signal.SIGALRM, expired)
    signal.alarm(int(seconds))


def kill_processes_of(rundir):
    """Kills (SIGKILL) every process whose environment names `rundir` as its run directory:
    the workers a test's launcher started, which outlive it by design (a shared socket's holders)
    and which no Proc knows. Returns how many there were."""
    needle = f"RDS_PRELOAD_RUNDIR={rundir}".encode() + b"\0"
    killed = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if needle in f.read() + b"\0":
                    os.kill(int(pid), signal.SIGKILL)
                    killed += 1
        except (OSError, ProcessLookupError):
            pass
    return killed


def make_tmpdir(tag):
    d = tempfile.mkdtemp(prefix=f"rds-it-{tag}-")
    CLEANUP.dirs.append(d)
    return d


def _reachable_by_all(path):
    """True when every directory from / down to path has the search bit for others."""
    path = os.path.realpath(path)
    while True:
        try:
            if not os.stat(path).st_mode & 0o001:
                return False
        except OSError:
            return False
        parent = os.path.dirname(path)
        if parent == path:
            return True
        path = parent


def other_users_dir(tag):
    """A new temporary directory that processes of every uid can enter and read (mode 0755), for
    what a test runs as another user must open: copies of the preload library and of helper
    scripts, its run directories. Such a process must not be given paths into the checkout or
    the build directory: they may lie under a directory only their owner can enter (root's home,
    a 0700 home directory, a `mktemp -d` folder), and the tests must not loosen permissions of
    the user's tree. The parent is the first of tempfile's choice ($TMPDIR), /tmp, /var/tmp and
    /dev/shm that everyone can reach; SkipTest when none is. Removed by CLEANUP."""
    for base in (tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm"):
        if os.path.isdir(base) and os.access(base, os.W_OK | os.X_OK) and _reachable_by_all(base):
            d = tempfile.mkdtemp(prefix=f"rds-it-{tag}-", dir=base)
            CLEANUP.dirs.append(d)
            os.chmod(d, 0o755)
            return d
    raise unittest.SkipTest("no temporary directory that other users can enter ($TMPDIR, /tmp, "
                            "/var/tmp, /dev/shm)")


def share_with_other_users(directory, *paths):
    """Copies each file into directory (made by other_users_dir), readable by everyone and
    executable when the original is; returns the paths of the copies, in order."""
    out = []
    for p in paths:
        dst = os.path.join(directory, os.path.basename(p))
        shutil.copyfile(p, dst)
        os.chmod(dst, 0o755 if os.stat(p).st_mode & 0o111 else 0o644)
        out.append(dst)
    return out


def plain_env(**extra):
    """The driver's environment without LD_PRELOAD and without RDS_IT_PRELOAD_LIB (the shim reads
    every RDS_PRELOAD_* variable as a setting and warns about unknown ones)."""
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "RDS_IT_PRELOAD_LIB")}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def preload_value(lib=None):
    """The LD_PRELOAD value for a child: the shim (lib, by default RDS_IT_PRELOAD_LIB), followed
    in a sanitizer build by the sanitizer runtime (RDS_IT_PRELOAD_RUNTIME, set by
    tests/meson.build, which explains the order)."""
    lib = lib or path_of("RDS_IT_PRELOAD_LIB")
    runtime = os.environ.get("RDS_IT_PRELOAD_RUNTIME")
    return f"{lib}:{runtime}" if runtime else lib


def sanitizer_env(argv):
    """Sanitizer builds only: extra environment for a child running argv[0]. Programs built by
    this project (under RDS_IT_BUILD_ROOT) keep ASAN_OPTIONS as meson set it (leak checking
    on); foreign programs (python3 running a helper script, ...) get RDS_IT_FOREIGN_ASAN_OPTIONS
    (leak checking off: they are not instrumented and python3 does not free everything)."""
    foreign = os.environ.get("RDS_IT_FOREIGN_ASAN_OPTIONS")
    root = os.environ.get("RDS_IT_BUILD_ROOT")
    if not foreign or not root:
        return {}
    prog = os.path.realpath(shutil.which(str(argv[0])) or str(argv[0]))
    if prog.startswith(os.path.realpath(root) + os.sep):
        return {}
    return {"ASAN_OPTIONS": foreign}


def sanitizer_build():
    """True when the suite runs in a sanitizer build (tests/meson.build). Bounds on memory use do
    not hold there: ASan keeps up to 256 MiB of freed memory in quarantine, plus redzones."""
    return bool(os.environ.get("RDS_IT_PRELOAD_RUNTIME"))


def preload_env(rundir, **extra):
    env = plain_env(**extra)
    env["LD_PRELOAD"] = preload_value()
    env["RDS_PRELOAD_RUNDIR"] = rundir
    return env


# --------------------------------------------------------------------------------------------
# Child processes with a line-based stdout protocol.

class Proc:
    """A child with stdin/stdout pipes; stderr goes to a file shown in failure messages.

    With netns=NAME the command runs as `ip netns exec NAME env LD_PRELOAD=... cmd`, so only the
    command itself (not `ip`) is preloaded. cwd: the child's working directory (by default the
    driver's).
    """

    def __init__(self, name, argv, rundir, netns=None, preload=True, pass_fds=(), extra_env=None,
                 cwd=None):
        self.name = name
        self.lines = []
        self._buf = b""
        self._eof = False
        extra_env = extra_env or {}
        if preload:
            extra_env = {**sanitizer_env(argv), **extra_env}
        errdir = rundir if os.path.isdir(rundir) else tempfile.gettempdir()
        self.errpath = os.path.join(errdir, f"{name}.stderr")
        self._err = open(self.errpath, "wb")
        argv = [str(a) for a in argv]
        if netns:
            prefix = ["ip", "netns", "exec", netns, "env"]
            if preload:
                prefix += [f"LD_PRELOAD={preload_value()}"]
            prefix += [f"RDS_PRELOAD_RUNDIR={rundir}"] + [f"{k}={v}" for k, v in extra_env.items()]
            argv = prefix + argv
            env = plain_env()
        else:
            env = preload_env(rundir, **extra_env) if preload else plain_env(
                RDS_PRELOAD_RUNDIR=rundir, **extra_env)
        self.argv = argv
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self._err, env=env, pass_fds=pass_fds, bufsize=0,
                                  cwd=cwd)
        CLEANUP.procs.append(self.p)

    @property
    def pid(self):
        return self.p.pid

    def _fill(self, timeout):
        """Reads what is available within timeout; returns False on timeout."""
        if self._eof:
            return True
        r, _, _ = select.select([self.p.stdout], [], [], max(0.0, timeout))
        if not r:
            return False
        data = os.read(self.p.stdout.fileno(), 65536)
        if not data:
            self._eof = True
        self._buf += data
        return True

    def readline(self, timeout):
        """Next stdout line, None at EOF; raises AssertionError on timeout."""
        end = time.monotonic() + timeout
        while b"\n" not in self._buf:
            if self._eof:
                if self._buf:
                    line, self._buf = self._buf.decode(errors="replace"), b""
                    self.lines.append(line)
                    return line
                return None
            if not self._fill(end - time.monotonic()):
                raise AssertionError(f"{self.name}: no output within {timeout:.0f} s\n{self.diag()}")
        line, self._buf = self._buf.split(b"\n", 1)
        line = line.decode(errors="replace")
        self.lines.append(line)
        return line

    def expect(self, prefixes, timeout, fail_on=("error", "fatal", "timeout")):
        """Reads lines until one starts with one of prefixes; returns it.

        A line starting with a fail_on word, EOF, or the timeout fails the test.
        """
        if isinstance(prefixes, str):
            prefixes = (prefixes,)
        end = time.monotonic() + timeout
        while True:
            line = self.readline(max(0.0, end - time.monotonic()))
            if line is None:
                raise AssertionError(f"{self.name}: exited before printing {prefixes}\n{self.diag()}")
            if any(line.startswith(p) for p in prefixes):
                return line
            if any(line.startswith(w) for w in fail_on):
                raise AssertionError(f"{self.name}: {line}\n{self.diag()}")

    def send(self, line):
        try:
            self.p.stdin.write((line + "\n").encode())
            self.p.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise AssertionError(f"{self.name}: cannot send {line!r}: {e}\n{self.diag()}")

    def close_stdin(self):
        try:
            self.p.stdin.close()
        except OSError:
            pass

    def wait(self, timeout):
        """Waits for exit (reading the rest of stdout); kills and fails on timeout."""
        end = time.monotonic() + timeout
        while not self._eof and time.monotonic() < end:
            self._fill(end - time.monotonic())
        while b"\n" in self._buf or (self._eof and self._buf):
            self.readline(0)
        try:
            return self.p.wait(timeout=max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            raise AssertionError(f"{self.name}: did not exit within {timeout:.0f} s\n{self.diag()}")

    def stderr_text(self, limit=4000):
        self._err.flush()
        try:
            with open(self.errpath, "rb") as f:
                data = f.read()
        except OSError:
            return ""
        return data[-limit:].decode(errors="replace")

    def diag(self):
        rc = self.p.poll()
        out = "\n    ".join(self.lines[-15:])
        err = self.stderr_text().strip().replace("\n", "\n    ")
        return (f"  [{self.name}] pid {self.p.pid} rc {rc}\n  cmd: {' '.join(self.argv)}\n"
                f"  stdout (last lines):\n    {out}\n  stderr:\n    {err}")


def wait_all(procs, prefix, timeout):
    """Waits until every proc printed a line starting with prefix; fails fast on an error line
    or an early exit of any of them. Returns {proc.name: line}."""
    end = time.monotonic() + timeout
    got = {}

    def everyone():
        return "\n".join(q.diag() for q in procs)

    while True:
        for p in procs:
            if p.name in got:
                continue
            while b"\n" in p._buf or (p._eof and p._buf):
                line = p.readline(0)
                if line.startswith(prefix):
                    got[p.name] = line
                    break
                if line.startswith(("error", "fatal", "timeout")):
                    raise AssertionError(f"{p.name}: {line}\n" + everyone())
            if p.name not in got and p._eof and not p._buf:
                raise AssertionError(f"{p.name} exited before printing '{prefix}'\n" + everyone())
        waiting = [p for p in procs if p.name not in got]
        if not waiting:
            return got
        left = end - time.monotonic()
        if left <= 0:
            raise AssertionError(f"timeout after {timeout:.0f} s waiting for '{prefix}' from "
                                 f"{[p.name for p in waiting]}\n" + everyone())
        ready, _, _ = select.select([p.p.stdout for p in waiting], [], [], min(left, 1.0))
        for p in waiting:
            if p.p.stdout in ready:
                p._fill(0)


PAIR_RE = re.compile(r"^pair (\S+) (\S+) count (\d+) sha256 ([0-9a-f]{64}) dir (tx|rx)$")


def pairs_of(proc):
    """{(src, dst, dir): (count, sha256)} from the pair lines a peer printed (the last wins)."""
    out = {}
    for line in proc.lines:
        m = PAIR_RE.match(line)
        if m:
            out[(m.group(1), m.group(2), m.group(5))] = (int(m.group(3)), m.group(4))
    return out


def check_pairs(tc, peers, expected_pairs, count):
    """Every expected (src, dst) pair: tx and rx lines exist, both count == count, hashes equal."""
    tx, rx = {}, {}
    for p in peers:
        for (src, dst, d), v in pairs_of(p).items():
            (tx if d == "tx" else rx)[(src, dst)] = (v, p.name)
    problems = []
    for pair in expected_pairs:
        t, r = tx.get(pair), rx.get(pair)
        if t is None or r is None:
            problems.append(f"{pair[0]} -> {pair[1]}: missing {'tx' if t is None else 'rx'} summary")
            continue
        (tc_, th), tn = t
        (rc_, rh), rn = r
        if tc_ != count or rc_ != count:
            problems.append(f"{pair[0]} -> {pair[1]}: sent {tc_} ({tn}) received {rc_} ({rn}), "
                            f"expected {count}")
        elif th != rh:
            problems.append(f"{pair[0]} -> {pair[1]}: SHA-256 differs: sender {th} receiver {rh}")
    unexpected = sorted(set(rx) - set(expected_pairs))
    for pair in unexpected:
        problems.append(f"{pair[0]} -> {pair[1]}: received {rx[pair][0][0]} messages on a pair "
                        f"that should carry none")
    if problems:
        tc.fail("per-pair check failed:\n  " + "\n  ".join(problems) + "\n" +
                "\n".join(p.diag() for p in peers))


def quit_all(tc, peers, timeout=20):
    """Sends quit to every peer and checks each exits 0 (5 = verification error or extra
    messages, see rds_peer.cc)."""
    for p in peers:
        if p.p.poll() is None:
            try:
                p.send("quit")
            except AssertionError:
                pass
    bad = []
    for p in peers:
        rc = p.wait(timeout)
        if rc != 0:
            bad.append(f"{p.name} exited {rc}")
    if bad:
        tc.fail("; ".join(bad) + "\n" + "\n".join(p.diag() for p in peers))


# --------------------------------------------------------------------------------------------
# Network namespaces.

def require_netns():
    """Skips the calling test unless we are root and `ip netns` works."""
    if os.geteuid() != 0:
        raise unittest.SkipTest("needs root (network namespaces); run as root to enable")
    if not shutil.which("ip"):
        raise unittest.SkipTest("needs iproute2 'ip' for network namespaces")
    name = f"rdsitprobe{unique_tag()}"
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True, timeout=20)
    if r.returncode != 0:
        raise unittest.SkipTest(f"'ip netns add' does not work here: {r.stderr.strip()}")
    subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=20)


def sh(*argv, timeout=20):
    r = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise AssertionError(f"command failed: {' '.join(map(str, argv))}: {r.stderr.strip()}")
    return r.stdout


def add_netns(name):
    sh("ip", "netns", "add", name)
    CLEANUP.netns.append(name)
    sh("ip", "-n", name, "link", "set", "lo", "up")
    return name


def add_veth(ns_a, if_a, cidr_a, ns_b, if_b, cidr_b):
    """A veth pair created directly inside ns_a (never visible in the caller's namespace)."""
    sh("ip", "-n", ns_a, "link", "add", if_a, "type", "veth", "peer", "name", if_b, "netns", ns_b)
    sh("ip", "-n", ns_a, "addr", "add", cidr_a, "dev", if_a)
    sh("ip", "-n", ns_b, "addr", "add", cidr_b, "dev", if_b)
    sh("ip", "-n", ns_a, "link", "set", if_a, "up")
    sh("ip", "-n", ns_b, "link", "set", if_b, "up")


def wait_addr_ready(ns, addr, timeout=10):
    """Waits until addr is usable in ns (IPv4 needs no DAD; this only guards a slow veth)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        out = sh("ip", "-n", ns, "-o", "addr", "show")
        if f" {addr}/" in out and "tentative" not in out:
            return
        time.sleep(0.05)
    raise AssertionError(f"address {addr} not ready in {ns}")


# --------------------------------------------------------------------------------------------
# Running.

def run_tests(limit_seconds):
    """unittest.main with meson's exit codes: 0 pass, 77 all skipped, 1 failure."""
    watchdog(limit_seconds)
    start = time.monotonic()
    main = sys.modules["__main__"]
    # Test names on the command line (Class.test_name) run only those.
    names = [a for a in sys.argv[1:] if not a.startswith("-")]
    suite = (unittest.defaultTestLoader.loadTestsFromNames(names, main) if names
             else unittest.defaultTestLoader.loadTestsFromModule(main))
    result = unittest.TextTestRunner(verbosity=2, stream=sys.stderr).run(suite)
    CLEANUP.run()
    log(f"driver time {time.monotonic() - start:.1f} s")
    if not result.wasSuccessful():
        sys.exit(1)
    # A skip in setUpClass is one entry for the whole class, whose tests are not counted as run.
    skipped_tests = sum(isinstance(test, unittest.TestCase) for test, _ in result.skipped)
    if result.skipped and result.testsRun == skipped_tests:
        sys.exit(EXIT_SKIP)
    sys.exit(0)


def errname(e):
    return errno.errorcode.get(e, str(e))


# --------------------------------------------------------------------------------------------
# Added for the reliability tests (test_soak.py, test_kill9.py, test_other_uid.py).

def make_two_hosts(label):
    """Two network namespaces joined by a veth pair, each one a 'host' for the shim.
    Returns (ns_a, ip_a, ns_b, ip_b); the namespaces are removed by CLEANUP. Needs root (call
    require_netns() first)."""
    tag = unique_tag()
    r = random.randrange(1, 255)
    ns_a = add_netns(f"rdsit{tag}{label}a")
    ns_b = add_netns(f"rdsit{tag}{label}b")
    net = f"10.{random.randrange(100, 200)}.{r}"
    ip_a, ip_b = f"{net}.1", f"{net}.2"
    add_veth(ns_a, f"ri{tag}a", f"{ip_a}/24", ns_b, f"ri{tag}b", f"{ip_b}/24")
    wait_addr_ready(ns_a, ip_a)
    wait_addr_ready(ns_b, ip_b)
    return ns_a, ip_a, ns_b, ip_b


def kv_fields(line):
    """{'key': 'value'} of the key=value words of a line (other words are ignored)."""
    out = {}
    for word in line.split():
        if "=" in word:
            k, v = word.split("=", 1)
            out[k] = v
    return out


def ask(proc, command, prefix, timeout=10):
    """Sends command to a line-protocol child and returns its reply line starting with prefix."""
    proc.send(command)
    return proc.expect(prefix, timeout)


def build_root():
    return os.path.dirname(os.path.dirname(path_of("RDS_IT_PRELOAD_LIB")))


def rdsctl_path():
    p = os.environ.get("RDSCTL") or os.path.join(build_root(), "tools", "rdsctl")
    if not os.path.isfile(p):
        raise AssertionError(f"rdsctl not built at {p}")
    return p


def rdsctl(rundir, *args, timeout=20):
    """Runs rdsctl (not preloaded) on rundir; returns (rc, stdout, stderr)."""
    env = plain_env(RDS_PRELOAD_RUNDIR=rundir)
    r = subprocess.run([rdsctl_path(), *args], capture_output=True, text=True, env=env,
                       timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def rdsctl_json(tc, rundir, *args):
    rc, out, err = rdsctl(rundir, "--json", *args)
    tc.assertEqual(rc, 0, f"rdsctl --json exited {rc}\nstdout:\n{out}\nstderr:\n{err}")
    try:
        return json.loads(out)
    except ValueError as e:
        tc.fail(f"rdsctl --json printed invalid JSON ({e}):\n{out}")
