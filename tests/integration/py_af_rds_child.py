"""Runs under LD_PRELOAD (started by test_python_af_rds.py): unmodified CPython socket code on
socket.AF_RDS. Every check prints "ok <name>" or "FAIL <name>: <why>"; exit 0 only if all passed.

Covers: socket(AF_RDS, SOCK_SEQPACKET), bind to port 0 and getsockname, sendto/recvfrom
(blocking), zero-length and 64 KiB messages, MSG_TRUNC through recvmsg, setblocking(False)
(ioctl FIONBIO) -> BlockingIOError, settimeout (non-blocking fd + poll inside CPython) -> timeout
then data, select.select, select.poll, select.epoll level-triggered (reported until drained) and
edge-triggered (one event per arrival, none without a new arrival), EPOLLOUT, socket.socket(fileno=)
auto-detection (SO_DOMAIN/SO_TYPE/SO_PROTOCOL), socket.fromfd/dup, selectors.DefaultSelector,
and asyncio's sock_recv on the RDS socket.
"""

import asyncio
import errno
import os
import select
import selectors
import socket
import sys
import time
import traceback

failures = 0
checks = 0


def check(name, cond, why=""):
    global failures, checks
    checks += 1
    if cond:
        print(f"ok {name}", flush=True)
    else:
        failures += 1
        print(f"FAIL {name}: {why}", flush=True)


def rds():
    return socket.socket(socket.AF_RDS, socket.SOCK_SEQPACKET, 0)


def wait_readable(s, timeout=3.0):
    r, _, _ = select.select([s], [], [], timeout)
    return bool(r)


def quiet(wait):
    """True if wait() reports nothing, allowing one spurious report first: kernel rds_poll
    reports POLLIN|POLLWRBAND once after any congestion-map update (kernel-rds.md A.6)."""
    return not wait() or not wait()


def drain(s):
    """Receives until EAGAIN on a non-blocking socket; returns the payloads."""
    out = []
    while True:
        try:
            out.append(s.recv(70000))
        except BlockingIOError:
            return out


def main():
    a, b = rds(), rds()
    a.bind(("127.0.0.1", 0))
    b.bind(("127.0.0.1", 0))
    aa, ba = a.getsockname(), b.getsockname()
    check("bind-port-0", aa[0] == "127.0.0.1" and aa[1] >= 2 and ba[1] >= 2 and aa != ba,
          f"{aa} {ba}")
    check("family-type", a.family == socket.AF_RDS and a.type == socket.SOCK_SEQPACKET,
          f"{a.family} {a.type}")

    # Blocking sendto / recvfrom.
    n = a.sendto(b"hello", ba)
    check("sendto-returns-length", n == 5, repr(n))
    b.settimeout(5)  # guard against a hang; exercised for real below
    data, src = b.recvfrom(100)
    check("recvfrom", data == b"hello" and src == aa, f"{data!r} {src}")
    b.settimeout(None)

    n = a.sendto(b"", ba)
    check("zero-length-send", n == 0, repr(n))
    data, src = b.recvfrom(100)
    check("zero-length-recv", data == b"" and src == aa, f"{data!r} {src}")

    big = bytes(range(256)) * 256  # 64 KiB
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    a.sendto(big, ba)
    data = b.recv(1 << 17)
    check("64KiB", data == big, f"got {len(data)} bytes")

    a.sendto(b"x" * 100, ba)
    data, anc, flags, src = b.recvmsg(10)
    check("msg-trunc", data == b"x" * 10 and flags & socket.MSG_TRUNC and src == aa,
          f"{data!r} flags {flags:#x} {src}")

    # Non-blocking.
    b.setblocking(False)
    try:
        b.recvfrom(100)
        check("nonblocking-eagain", False, "recvfrom returned data on an empty socket")
    except BlockingIOError:
        check("nonblocking-eagain", True)
    b.setblocking(True)

    # Timeouts: CPython makes the fd non-blocking and waits with poll().
    b.settimeout(0.3)
    t0 = time.monotonic()
    try:
        b.recvfrom(100)
        check("settimeout-expires", False, "got data on an empty socket")
    except socket.timeout:
        dt = time.monotonic() - t0
        check("settimeout-expires", 0.25 <= dt < 3.0, f"after {dt:.3f} s (want ~0.3 s)")
    a.sendto(b"in-time", ba)
    try:
        data, src = b.recvfrom(100)
        check("settimeout-data", data == b"in-time", repr(data))
    except socket.timeout:
        check("settimeout-data", False, "timed out although a message was sent")
    b.settimeout(None)

    # select.select and select.poll.
    r, w, _ = select.select([b], [b], [], 0)
    check("select-writable", b in w, f"r={r} w={w}")
    check("select-empty", quiet(lambda: select.select([b], [], [], 0.1)[0]), "always readable")
    a.sendto(b"sel", ba)
    check("select-readable", wait_readable(b), "not readable within 3 s")
    check("select-recv", b.recv(10) == b"sel")
    p = select.poll()
    p.register(b, select.POLLIN)
    check("poll-empty", quiet(lambda: p.poll(100)), "reported events on an empty socket")
    a.sendto(b"pol", ba)
    ev = p.poll(3000)
    check("poll-readable", ev and ev[0][1] & select.POLLIN, repr(ev))
    check("poll-recv", b.recv(10) == b"pol")

    # epoll, level-triggered.
    b.setblocking(False)
    ep = select.epoll()
    ep.register(b.fileno(), select.EPOLLIN)
    check("epoll-lt-empty", quiet(lambda: ep.poll(0.2)), "events on an empty socket")
    for i in range(3):
        a.sendto(b"lt%d" % i, ba)
    ev = ep.poll(3)
    check("epoll-lt-readable", ev and ev[0][1] & select.EPOLLIN, repr(ev))
    ev = ep.poll(0.2)
    check("epoll-lt-still-readable", ev and ev[0][1] & select.EPOLLIN, "level-triggered must "
          f"keep reporting until drained: {ev!r}")
    got = [b.recv(10)]
    ev = ep.poll(0.2)
    check("epoll-lt-after-one-recv", bool(ev), "2 messages left but no event")
    # The remaining messages may still be in flight on a slow engine: wait for both.
    deadline = time.monotonic() + 3
    while len(got) < 3 and time.monotonic() < deadline:
        got += drain(b)
        if len(got) < 3:
            ep.poll(0.1)
    check("epoll-lt-data", got == [b"lt0", b"lt1", b"lt2"], repr(got))
    check("epoll-lt-drained", quiet(lambda: ep.poll(0.2)), "events after draining everything")
    ep.close()

    # epoll, edge-triggered: an edge per arrival, none without a new arrival.
    ep = select.epoll()
    ep.register(b.fileno(), select.EPOLLIN | select.EPOLLET)
    check("epoll-et-empty", quiet(lambda: ep.poll(0.2)), "events on an empty socket")
    a.sendto(b"et0", ba)
    ev = ep.poll(3)
    check("epoll-et-first-edge", ev and ev[0][1] & select.EPOLLIN, repr(ev))
    check("epoll-et-no-second-event", ep.poll(0.3) == [],
          "edge-triggered reported again without a new arrival")
    a.sendto(b"et1", ba)
    ev = ep.poll(3)
    check("epoll-et-edge-per-arrival", ev and ev[0][1] & select.EPOLLIN,
          f"no event for a second arrival while the first is unread: {ev!r}")
    got = drain(b)
    check("epoll-et-data", got == [b"et0", b"et1"], repr(got))
    check("epoll-et-drained", ep.poll(0.2) == [], "event after draining")
    a.sendto(b"et2", ba)
    ev = ep.poll(3)
    check("epoll-et-after-drain", ev and ev[0][1] & select.EPOLLIN, repr(ev))
    check("epoll-et-after-drain-data", drain(b) == [b"et2"])
    ep.close()

    ep = select.epoll()
    ep.register(a.fileno(), select.EPOLLOUT)
    ev = ep.poll(1)
    check("epoll-out", ev and ev[0][1] & select.EPOLLOUT, repr(ev))
    ep.close()
    b.setblocking(True)

    # fileno= auto-detection and dup.
    # CPython 3.11 takes the family from getsockname() (AF_INET for a bound RDS socket, as with
    # kernel RDS), the type and protocol from SO_TYPE / SO_PROTOCOL.
    c = socket.socket(fileno=os.dup(b.fileno()))
    check("fileno-autodetect", c.family == socket.AF_INET and c.type == socket.SOCK_SEQPACKET
          and c.proto == 0, f"family {c.family} type {c.type} proto {c.proto}")
    dom = b.getsockopt(socket.SOL_SOCKET, socket.SO_DOMAIN)
    check("so-domain", dom == socket.AF_RDS, f"SO_DOMAIN {dom}")
    a.sendto(b"via-dup", ba)
    c.settimeout(5)
    data, src = c.recvfrom(100)
    check("dup-recv", data == b"via-dup" and src == aa, f"{data!r} {src}")
    c.close()
    d = socket.fromfd(b.fileno(), socket.AF_RDS, socket.SOCK_SEQPACKET)
    a.sendto(b"via-fromfd", ba)
    d.settimeout(5)
    check("fromfd-recv", d.recv(100) == b"via-fromfd")
    d.close()
    # b survives the close of its dups.
    a.sendto(b"orig", ba)
    b.settimeout(5)
    check("original-after-dup-close", b.recv(100) == b"orig")
    b.settimeout(None)

    # selectors (epoll underneath).
    sel = selectors.DefaultSelector()
    sel.register(b, selectors.EVENT_READ)
    a.sendto(b"sel2", ba)
    ev = sel.select(3)
    check("selectors", len(ev) == 1 and ev[0][0].fileobj is b, repr(ev))
    check("selectors-recv", b.recv(10) == b"sel2")
    sel.close()

    # asyncio.
    async def roundtrip():
        loop = asyncio.get_running_loop()
        b.setblocking(False)
        loop.call_later(0.1, a.sendto, b"async", ba)
        return await asyncio.wait_for(loop.sock_recv(b, 100), 5)

    try:
        data = asyncio.run(roundtrip())
        check("asyncio-sock_recv", data == b"async", repr(data))
    except Exception as e:  # noqa: BLE001 - report, do not crash
        check("asyncio-sock_recv", False, repr(e))
    b.setblocking(True)

    # Errors come back as Python exceptions with the kernel's errno.
    try:
        rds().sendto(b"x", ba)
        check("unbound-send-enotconn", False, "sendto from an unbound socket succeeded")
    except OSError as e:
        check("unbound-send-enotconn", e.errno == errno.ENOTCONN, errno.errorcode.get(e.errno))
    try:
        rds().bind(aa)
        check("bind-eaddrinuse", False, "second bind to the same address succeeded")
    except OSError as e:
        check("bind-eaddrinuse", e.errno == errno.EADDRINUSE, errno.errorcode.get(e.errno))

    a.close()
    b.close()


if __name__ == "__main__":
    lib = os.environ.get("LD_PRELOAD", "")
    if lib:
        with open("/proc/self/maps") as f:
            maps = f.read()
        for entry in lib.replace(":", " ").split():
            if os.path.realpath(entry) not in maps:
                print(f"fatal preload-not-loaded {entry}", flush=True)
                sys.exit(2)
    try:
        main()
    except Exception:
        traceback.print_exc()
        print("FAIL exception: see stderr", flush=True)
        failures += 1
    print(f"summary checks {checks} failures {failures}", flush=True)
    sys.exit(1 if failures else 0)
