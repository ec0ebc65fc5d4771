"""Runs under LD_PRELOAD (started by test_shared_sockets.py): corner cases of one RDS socket
held by several processes (DESIGN.md §2.4). Prints "ok ..." or "FAIL ..." lines.

  many-queued PORT N   The binder forks a child that makes one call on the socket (so the binder
                       serves it), prints "ready", waits for "go" on stdin (N messages are sent to
                       PORT meanwhile: more than a Unix datagram queue holds), then closes the
                       socket and exits. The child then receives all N, in order.
  unbound-fork PORT    An unbound socket is shared by fork; the child binds it to PORT; the parent
                       sees it bound and receives on it.
  streaming-handover PORT N
                       The binder forks a receiver, and another process streams N numbered
                       messages to PORT while the binder closes the socket half-way (the socket
                       passes to the receiver with messages on their way): the receiver gets all
                       N, in order, none twice.
  wait-takeover PORT HOW
                       A fork child waits for the socket to become readable (HOW: poll, select,
                       epoll, or a recv with a timeout) while the binder owns it; the binder
                       closes it (the child's wait takes it over) and another process sends one
                       message afterwards: the wait ends with it, long before its 10 s limit.
  info-churn PORT      While one child loops on a forwarded RDS_INFO getsockopt, another forks
                       300 short-lived children that each make one call on the shared socket:
                       nothing may hang.
"""

import os
import select
import socket
import sys
import time

SOL_RDS = 276
RDS_INFO_CONNECTIONS = 10001


def rds():
    return socket.socket(socket.AF_RDS, socket.SOCK_SEQPACKET)


def many_queued(port, n):
    s = rds()
    s.bind(("127.0.0.1", port))
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(w)
        try:
            s.recvfrom(64, socket.MSG_DONTWAIT)
        except BlockingIOError:
            pass
        os.read(r, 1)  # EOF: the binder is gone
        s.settimeout(5)
        got = []
        try:
            while len(got) < n:
                data, _ = s.recvfrom(64)
                got.append(int(data))
        except OSError as e:
            print(f"FAIL child got {len(got)} of {n}: {e}", flush=True)
            os._exit(1)
        ok = got == list(range(n))
        print(("ok" if ok else "FAIL") + f" child got {len(got)} of {n} in order={ok}", flush=True)
        os._exit(0 if ok else 1)
    os.close(r)
    time.sleep(0.3)  # the child's first call has reached this process
    print("ready", flush=True)
    sys.stdin.readline()
    s.close()
    os._exit(0)  # the pipe's end goes with it


def unbound_fork(port):
    s = rds()
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        s.bind(("127.0.0.1", port))
        os.write(w, b"b")
        data, _ = s.recvfrom(64)  # answered below by the parent's own socket
        os._exit(0 if data == b"ping" else 1)
    os.read(r, 1)
    name = s.getsockname()
    print(("ok" if name[1] == port else "FAIL") + f" parent sees the child's bind: {name}",
          flush=True)
    c = rds()
    c.bind(("127.0.0.1", 0))
    c.sendto(b"ping", ("127.0.0.1", port))
    _, status = os.waitpid(child, 0)
    print(("ok" if status == 0 else "FAIL") + f" child received on its bind: status {status}",
          flush=True)


def streaming_handover(port, n):
    s = rds()
    s.bind(("127.0.0.1", port))
    # Every child starts after the last fork (a fork while this process's engine thread works
    # is unsafe under AddressSanitizer only: see shared_echo.c).
    go_r, go_w = os.pipe()
    receiver = os.fork()
    if receiver == 0:
        os.close(go_w)
        os.read(go_r, 1)
        s.settimeout(5)
        got = []
        try:
            while len(got) < n:
                data, _ = s.recvfrom(64)
                got.append(int(data))
        except OSError:
            pass
        ok = got == list(range(n))
        first_bad = next((i for i, v in enumerate(got) if v != i), None)
        print(("ok" if ok else "FAIL") + f" receiver got {len(got)} of {n}, in order up to "
              f"{first_bad if first_bad is not None else len(got)}", flush=True)
        os._exit(0 if ok else 1)
    sender = os.fork()
    if sender == 0:
        os.close(go_w)
        os.read(go_r, 1)
        time.sleep(0.3)  # the receiver's first call has reached the binder
        c = rds()
        c.bind(("127.0.0.1", 0))
        for i in range(n):
            while True:
                try:
                    c.sendto(b"%d" % i, ("127.0.0.1", port))
                    break
                except (BlockingIOError, ConnectionRefusedError, OSError) as e:
                    if getattr(e, "errno", None) not in (11, 105):  # EAGAIN, ENOBUFS
                        raise
                    time.sleep(0.001)
        os._exit(0)
    os.close(go_w)
    time.sleep(0.35)
    s.close()  # half-way: the socket passes to the receiver
    os.waitpid(sender, 0)
    _, status = os.waitpid(receiver, 0)
    sys.exit(0 if status == 0 else 1)


def wait_takeover(port, how):
    s = rds()
    s.bind(("127.0.0.1", port))
    go_r, go_w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(go_w)
        os.read(go_r, 1)
        t0 = time.monotonic()
        got = None
        if how == "timeout":
            s.settimeout(10)
            try:
                got = s.recvfrom(64)[0]
            except OSError:
                pass
        else:
            s.setblocking(False)
            while got is None and time.monotonic() - t0 < 10:
                left = 10 - (time.monotonic() - t0)
                if how == "poll":
                    p = select.poll()
                    p.register(s.fileno(), select.POLLIN)
                    ready = p.poll(left * 1000)
                elif how == "select":
                    ready = select.select([s], [], [], left)[0]
                else:
                    e = select.epoll()
                    e.register(s.fileno(), select.EPOLLIN)
                    ready = e.poll(left)
                    e.close()
                if not ready:
                    break
                try:
                    got = s.recvfrom(64)[0]
                except BlockingIOError:
                    pass  # the owner's hand-over itself made the fd readable once
        took = time.monotonic() - t0
        ok = got == b"after" and took < 5
        print(("ok" if ok else "FAIL") + f" {how}: got {got!r} after {took:.2f} s", flush=True)
        os._exit(0 if ok else 1)
    os.close(go_r)
    os.close(go_w)
    time.sleep(0.3)  # the child waits
    s.close()  # the socket passes to the child, in its wait
    time.sleep(0.5)
    c = rds()
    c.bind(("127.0.0.1", 0))
    c.sendto(b"after", ("127.0.0.1", port))
    _, status = os.waitpid(child, 0)
    sys.exit(0 if status == 0 else 1)


def info_churn(port):
    s = rds()
    s.bind(("127.0.0.1", port))
    go_r, go_w = os.pipe()
    info = os.fork()
    if info == 0:
        os.close(go_w)
        os.read(go_r, 1)  # after the last fork here (see streaming_handover)
        for _ in range(3000):
            s.getsockopt(SOL_RDS, RDS_INFO_CONNECTIONS, 65536)
        os._exit(0)
    churn = os.fork()
    if churn == 0:
        os.close(go_w)
        os.read(go_r, 1)
        for _ in range(300):
            g = os.fork()
            if g == 0:
                s.getsockname()
                os._exit(0)
            os.waitpid(g, 0)
        os._exit(0)
    os.close(go_w)
    end = time.monotonic() + 60
    pending = {info, churn}
    while pending and time.monotonic() < end:
        for pid in list(pending):
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                pending.discard(pid)
        time.sleep(0.05)
    print(("FAIL hung: " if pending else "ok no hang") + str(sorted(pending)), flush=True)


if __name__ == "__main__":
    cmd, port = sys.argv[1], int(sys.argv[2])
    if cmd == "many-queued":
        many_queued(port, int(sys.argv[3]))
    elif cmd == "unbound-fork":
        unbound_fork(port)
    elif cmd == "streaming-handover":
        streaming_handover(port, int(sys.argv[3]))
    elif cmd == "wait-takeover":
        wait_takeover(port, sys.argv[3])
    elif cmd == "info-churn":
        info_churn(port)
