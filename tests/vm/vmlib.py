"""What the VM-harness tests (tests/vm/test_*.py) share: finding ../shared/vm and qemu (or
skipping, exit 77, with a message), the build under test, and the run.sh command line that
shares the checkout and the build with the guests."""

import os
import shutil
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
