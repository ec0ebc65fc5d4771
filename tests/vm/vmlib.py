"""What the VM-harness tests (tests/vm/test_*.py) share: finding ../shared/vm and qemu (or
skipping, exit 77, with a message), the build under test, and the run.sh command line that
shares the checkout and the build with the guests."""

import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SKIP = 77


def fail(msg):
    print(f"FAIL: {msg}", flush=True)
    sys.exit(1)


def run_sh():
    """run.sh of the harness, or exits 77 (skip) saying why it cannot be used."""
    harness = os.environ.get("RDS_VM_HARNESS") or os.path.join(REPO, "..", "shared", "vm")
    path = os.path.join(harness, "run.sh")
    if not os.path.isfile(path):
        print(f"SKIP: no VM harness at {harness} (set RDS_VM_HARNESS to ../shared/vm)", flush=True)
        sys.exit(SKIP)
    if not shutil.which("qemu-system-x86_64"):
        print(f"SKIP: qemu-system-x86_64 is not installed (run {harness}/setup.sh)", flush=True)
        sys.exit(SKIP)
    return path


def build_dir():
    """The build directory whose preload library is under test (meson passes it)."""
    return os.path.dirname(os.path.dirname(os.environ.get(
        "RDS_IT_PRELOAD_LIB", os.path.join(REPO, "build", "preload", "librds_preload.so"))))


def command(*opts):
    """run.sh with `opts` and the shares the guests need: they see the host's files except
    /tmp, /run and /dev/shm (their own tmpfs), so the checkout and the build are shared
    explicitly, wherever they are."""
    shares = []
    for d in sorted({REPO, os.path.realpath(build_dir())}):
        if not any(d.startswith(s + os.sep) for s in shares):
            shares.append(d)
    cmd = [run_sh(), *opts]
    for d in shares:
        cmd += ["-w", d]
    return cmd


ADDRS = {"vm1": ("10.77.0.1", "10.77.0.2"), "vm2": ("10.77.0.2", "10.77.0.1")}


def run_guests(script, shim_vm, guest_seconds):
    """Boots the two guests, each running `script BUILD ROLE MY_ADDR PEER_ADDR` — the shim on
    `shim_vm`, the kernel node on the other — and returns their output (printed too)."""
    build = build_dir()
    cmds = {vm: f"{script} {build} {'shim' if vm == shim_vm else 'kernel'} {me} {peer}"
            for vm, (me, peer) in ADDRS.items()}
    cmd = command("-c", "1", "-t", str(guest_seconds)) + ["--peer", cmds["vm2"], "--", cmds["vm1"]]
    print("+ " + " ".join(cmd), flush=True)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=guest_seconds + 60)
    except subprocess.TimeoutExpired:
        fail(f"the guests (shim on {shim_vm}) did not finish within {guest_seconds + 60} s")
    print(r.stdout + r.stderr, flush=True)
    return r.stdout


class Checks:
    """Named checks printed as they go; `done()` fails the test if any did not hold."""

    def __init__(self, what):
        self.what, self.bad = what, []

    def check(self, ok, line):
        print(("ok   " if ok else "FAIL ") + line, flush=True)
        if not ok:
            self.bad.append(line)

    def done(self):
        if self.bad:
            fail("\n  ".join([self.what + ":"] + self.bad))
        print("every check ok", flush=True)
