#!/usr/bin/env python3
"""Python programs at the edges of a process's life (issue 21); run under LD_PRELOAD.

  send-and-end SRC DST DPORT   binds SRC:0, sends one message to DST:DPORT and simply ends (the
                               interpreter closes the socket object at shutdown): it must arrive.
  subprocess                   a bound socket survives subprocess.run, Popen, check_output,
                               os.popen and os.system (CPython starts children with vfork and
                               closes their inherited descriptors before exec).
  fork-sockets N               one socket in the parent; N os.fork() children each make and use
                               their own.

Prints "ok ..." / "FAIL ...: ..." lines; exit status 1 if a check failed.
"""

import os
import socket
import subprocess
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


def send_and_end(src, dst, dport):
    s = socket.socket(socket.AF_RDS, socket.SOCK_SEQPACKET)
    s.bind((src, 0))
    s.sendto(f"from pid {os.getpid()}".encode(), (dst, dport))


def recv_within(s, seconds):
    s.settimeout(seconds)
    try:
        return s.recv(256)
    except OSError as e:
        return e


def check_subprocess():
    s = socket.socket(socket.AF_RDS, socket.SOCK_SEQPACKET)
    s.bind(("127.0.0.1", 0))
    me = s.getsockname()
    starters = [
        ("subprocess.run", lambda: subprocess.run(["/bin/true"], check=True)),
        ("Popen", lambda: subprocess.Popen(["/bin/true"]).wait()),
        ("check_output", lambda: subprocess.check_output(["/bin/echo", "x"])),
        ("os.popen", lambda: os.popen("true").close()),
        ("os.system", lambda: os.system("true")),
        ("close_fds=False", lambda: subprocess.run(["/bin/true"], close_fds=False)),
    ]
    for name, start in starters:
        start()
        try:
            now = s.getsockname()
        except OSError as e:
            now = e
        report(now == me, f"{name}: getsockname unchanged", f"{now!r} != {me!r}")
        try:
            s.sendto(name.encode(), me)
            got = recv_within(s, 5)
        except OSError as e:
            got = e
        report(got == name.encode(), f"{name}: send to itself and receive", repr(got))
    other = socket.socket(socket.AF_RDS, socket.SOCK_SEQPACKET)
    try:
        other.bind(me)
        report(False, "port still held after the subprocesses", "another socket could bind it")
    except OSError as e:
        report(e.errno == 98, "port still held after the subprocesses", repr(e))


def fork_sockets(n):
    parent = socket.socket(socket.AF_RDS, socket.SOCK_SEQPACKET)
    pids = []
    # The children start after the last fork, and the engine the first fork starts in this
    # process (to serve the shared socket, engine/share.h) settles first: under GCC 12's
    # AddressSanitizer a fork while another thread allocates leaves the child's allocator
    # locked (DESIGN.md §10). glibc's malloc has no such problem.
    go_r, go_w = os.pipe()
    for i in range(n):
        pid = os.fork()
        if pid == 0:
            os.close(go_w)
            os.read(go_r, 1)
            code = 1
            try:
                c = socket.socket(socket.AF_RDS, socket.SOCK_SEQPACKET)
                c.bind(("127.0.0.1", 0))
                c.sendto(b"self", c.getsockname())
                c.settimeout(5)
                code = 0 if c.recv(16) == b"self" else 3
            except OSError as e:
                print(f"child {os.getpid()}: {e!r}", flush=True)
            os._exit(code)
        pids.append(pid)
        if i == 0:
            time.sleep(0.5)
    os.close(go_w)
    ok = sum(1 for pid in pids if os.waitpid(pid, 0)[1] == 0)
    print(f"children-ok {ok} of {n}", flush=True)
    report(ok == n, "os.fork children make their own sockets", f"{n - ok} of {n} failed")
    parent.close()


def main():
    cmd = sys.argv[1]
    if cmd == "send-and-end":
        send_and_end(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif cmd == "subprocess":
        check_subprocess()
    elif cmd == "fork-sockets":
        fork_sockets(int(sys.argv[2]))
    else:
        sys.exit(f"unknown command {cmd}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
