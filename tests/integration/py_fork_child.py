"""Runs under LD_PRELOAD (started by test_close_and_fork.py): RDS sockets across os.fork().

Parent and child share each socket, as with kernel RDS (DESIGN.md §2.4): the child sends from
the parent's bound socket, receives what is sent to it, binds the inherited unbound socket (the
parent then sees it bound); close works. The parent's sockets keep working after the child
exited. Prints "ok ..." / "FAIL ..." lines; exit 0 only when everything passed.
"""

import errno
import os
import select
import signal
import socket
import sys
import time

failures = 0


def report(ok, what, why=""):
    global failures
    if ok:
        print(f"ok {what}", flush=True)
    else:
        failures += 1
        print(f"FAIL {what}: {why}", flush=True)


def recv_within(sock, seconds):
    r, _, _ = select.select([sock], [], [], seconds)
    if not r:
        return None
    return sock.recvfrom(256)


s = socket.socket(socket.AF_RDS, socket.SOCK_SEQPACKET)
s.bind(("127.0.0.1", 0))
r = socket.socket(socket.AF_RDS, socket.SOCK_SEQPACKET)
r.bind(("127.0.0.1", 0))
u = socket.socket(socket.AF_RDS, socket.SOCK_SEQPACKET)  # never bound
s.sendto(b"before", r.getsockname())
got = recv_within(r, 3)
report(got is not None and got[0] == b"before", "py-fork/parent-before", repr(got))

sys.stdout.flush()
pid = os.fork()
if pid == 0:
    signal.alarm(10)  # a hanging call kills the child with SIGALRM
    failures = 0
    try:
        s.recvfrom(16, socket.MSG_DONTWAIT)
        report(False, "py-fork/child-recvfrom-empty", "got a message (want EAGAIN)")
    except BlockingIOError:
        report(True, "py-fork/child-recvfrom-empty")
    s.sendto(b"from-child", r.getsockname())
    report(True, "py-fork/child-sendto")
    got = recv_within(s, 5)
    report(got is not None and got[0] == b"to-inherited" and got[1] == r.getsockname(),
           "py-fork/child-recvfrom", repr(got))
    u.bind(("127.0.0.1", 0))
    report(u.getsockname()[1] != 0, "py-fork/child-bind-unbound", repr(u.getsockname()))
    try:
        s.close()
        u.close()
        report(True, "py-fork/child-close")
    except OSError as e:
        report(False, "py-fork/child-close", str(e))
    sys.stdout.flush()
    os._exit(1 if failures else 0)

got = recv_within(r, 5)
report(got is not None and got[0] == b"from-child" and got[1] == s.getsockname(),
       "py-fork/parent-gets-childs-message", repr(got))
r.sendto(b"to-inherited", s.getsockname())

deadline = time.monotonic() + 15
while True:
    wpid, status = os.waitpid(pid, os.WNOHANG)
    if wpid:
        break
    if time.monotonic() > deadline:
        os.kill(pid, signal.SIGKILL)
        wpid, status = os.waitpid(pid, 0)
        report(False, "py-fork/child-exited", "child hung for 15 s")
        break
    time.sleep(0.01)
if os.WIFSIGNALED(status):
    report(False, "py-fork/child-exited", f"killed by signal {os.WTERMSIG(status)}")
else:
    report(os.WEXITSTATUS(status) == 0, "py-fork/child-checks", f"exit {os.WEXITSTATUS(status)}")

s.sendto(b"after", r.getsockname())
got = recv_within(r, 3)
report(got is not None and got[0] == b"after" and got[1] == s.getsockname(),
       "py-fork/parent-after-s-to-r", repr(got))
r.sendto(b"back", s.getsockname())
got = recv_within(s, 3)
report(got is not None and got[0] == b"back", "py-fork/parent-after-r-to-s", repr(got))
report(u.getsockname()[1] != 0, "py-fork/parent-sees-childs-bind", repr(u.getsockname()))
print(f"summary failures {failures}", flush=True)
sys.exit(1 if failures else 0)
