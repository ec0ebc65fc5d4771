#!/usr/bin/env python3
"""An AF_RDS echo pair for kernel-interop runs in ../shared/vm guests: the same program on a kernel
node (rds_tcp loaded) and under the shim (LD_PRELOAD), so either side can be either.

  rds_echo.py server ADDR PORT COUNT [LINGER]
                                            echoes COUNT messages back to their senders, then exits
                                            (after LINGER seconds with the socket open: 0)
  rds_echo.py client ADDR PORT PEER PPORT SIZES ROUNDS
                                            sends each size ROUNDS times (content numbered), checks
                                            each echo's content and order; prints "ok N" or fails
  rds_echo.py ping ADDR PORT PEER COUNT     rds-ping's way: COUNT empty messages to PEER's port 0,
                                            each answered by an empty pong from port 0
  rds_echo.py hold ADDR PORT SECONDS        keeps a bound socket (so that a shim host answers)
  rds_echo.py ibinfo ADDR PORT              prints RDS_INFO_IB_CONNECTIONS ("ib_conn SRC DST ...")
  rds_echo.py reset ADDR PEER               drops the host's connection ADDR->PEER (RDS_CONN_RESET)
  rds_echo.py stream ADDR PORT PEER PPORT COUNT
                                            sends COUNT numbered 64 B messages (pausing 2 ms every
                                            5, or RDS_ECHO_PACE seconds after each; "progress N"
                                            every 500), then prints "sent N"; with
                                            RDS_ECHO_KILL_AT=N:PID, kill -9 PID after N; with
                                            RDS_ECHO_UNTIL=FILE, goes on past COUNT until FILE
                                            exists
  rds_echo.py echo_stream ADDR PORT PEER EPORT ROUNDS CPORT COUNT
                                            in one process: ROUNDS 64 B round trips to PEER:EPORT
                                            (from PORT+100; prints "echoed"), then stream to CPORT
  rds_echo.py collect ADDR PORT IDLE [FIRST]
                                            receives numbered messages until none came for IDLE
                                            seconds (FIRST seconds for the first one); prints per
                                            sender "source PORT n=N dups=D gaps=G order=ok|bad"
  rds_echo.py duplex ADDR PORT PEER PPORT COUNT IDLE
                                            stream (as above) and collect on one socket at once,
                                            then print "counter recv_drop_old_seq N"
  rds_echo.py fill ADDR PORT PEER PPORT      non-blocking 1 KiB sends until ENOBUFS (the peer port
                                            congested): "congested after N", else FAIL
  rds_echo.py unblocked ADDR PORT PEER PPORT SECONDS
                                            non-blocking sends until one succeeds: "uncongested"
  rds_echo.py phased ADDR PORT PEER PPORT STOPFILE N
                                            sends "o:<i>" messages (a send timing out is tried
                                            again) until STOPFILE exists, then, once STOPFILE.new
                                            exists, N "n:<i>" messages
  rds_echo.py stall ADDR PORT COUNT          receives COUNT messages, then stops itself (SIGSTOP)
  rds_echo.py tally ADDR PORT IDLE           receives until IDLE seconds pass without a message;
                                            prints "old n=… last=… contiguous=…", "new n=… dups=…
                                            gaps=… order=…" and "dropped <recv_drop_old_seq>"
  rds_echo.py sink ADDR PORT RCVBUF SECONDS  binds with a small receive buffer, reads nothing for
                                            SECONDS, then drains: "drained N"
  rds_echo.py forked ADDR PORT PEER PPORT COUNT
                                            a daemon's way: sends COUNT numbered 64 B messages to
                                            PEER:PPORT, forks, and the parent exits; the child
                                            sends COUNT more on the socket, then execs this program,
                                            which sends COUNT more on the inherited descriptor,
                                            prints "forked: sent N", then receives what the peer
                                            sent meanwhile (as collect, from the first stage on)
  rds_echo.py fan ADDR BASE NPORTS PEER PPORT COUNT [LINGER]
                                            NPORTS sockets (ports BASE..) stream COUNT numbered
                                            messages each to PEER:PPORT at once (one thread each),
                                            print "fanned", and stay open LINGER seconds
"""
import ctypes
import os
import struct
import threading
import signal
import socket
import sys
import time

BUF = 8 << 20


def rds_socket(addr, port):
    s = socket.socket(socket.AF_RDS, socket.SOCK_SEQPACKET, 0)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, BUF)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, BUF)
    s.bind((addr, port))
    return s


def payload(i, size):
    head = f"{i:08d}".encode()
    return (head * (size // len(head) + 1))[:size]


def server(addr, port, count, linger="0"):
    s = rds_socket(addr, int(port))
    print("ready", flush=True)
    for _ in range(int(count)):
        data, peer = s.recvfrom(1 << 20)
        s.sendto(data, peer)
    print("served", count, flush=True)
    # A kernel socket's close drops its messages not yet on the wire (rds_send_drop_to): a
    # server whose last echoes are still queued behind a slow receiver keeps the socket open.
    time.sleep(float(linger))


def client(addr, port, peer, pport, sizes, rounds):
    s = rds_socket(addr, int(port))
    s.settimeout(60)
    dest = (peer, int(pport))
    n = 0
    start = time.monotonic()
    for size in [int(x) for x in sizes.split(",")]:
        for r in range(int(rounds)):
            want = payload(n, size)
            s.sendto(want, dest)
            got, src = s.recvfrom(1 << 20)
            if got != want or src != dest:
                print(f"FAIL message {n} ({size} B): got {len(got)} B from {src}", flush=True)
                sys.exit(1)
            n += 1
    print(f"ok {n} in {time.monotonic() - start:.1f} s", flush=True)


def ping(addr, port, peer, count):
    s = rds_socket(addr, int(port))
    s.settimeout(30)
    start = time.monotonic()
    for i in range(int(count)):
        s.sendto(b"", (peer, 0))
        got, src = s.recvfrom(1 << 16)
        if got != b"" or src != (peer, 0):
            print(f"FAIL ping {i}: got {len(got)} B from {src}", flush=True)
            sys.exit(1)
    print(f"ok {count} pongs in {time.monotonic() - start:.1f} s", flush=True)


def hold(addr, port, seconds):
    s = rds_socket(addr, int(port))
    print("holding", flush=True)
    time.sleep(float(seconds))
    s.close()


def stream(addr, port, peer, pport, count, s=None):
    s = s or rds_socket(addr, int(port))
    # RDS_ECHO_KILL_AT=N:PID — kill -9 PID once N messages are sent (in mid-stream, exactly).
    kill_at = os.environ.get("RDS_ECHO_KILL_AT")
    kill_at = tuple(int(x) for x in kill_at.split(":")) if kill_at else None
    dest = (peer, int(pport))
    pace = float(os.environ.get("RDS_ECHO_PACE", "0"))  # seconds after each message
    # RDS_ECHO_UNTIL=FILE — past COUNT, go on sending until FILE exists (checked every 100): the
    # stream spans whatever another guest does to the connections meanwhile.
    until = os.environ.get("RDS_ECHO_UNTIL")
    i = 0
    while i < int(count) or (until and not (i % 100 == 0 and os.path.exists(until))):
        s.sendto(f"{port}:{i:08d}".encode().ljust(64, b"."), dest)
        if pace:
            time.sleep(pace)
        elif i % 5 == 4:
            time.sleep(0.002)
        if i % 500 == 499:
            print(f"progress {i + 1}", flush=True)
        if kill_at is not None and i + 1 == kill_at[0]:
            os.kill(kill_at[1], signal.SIGKILL)
            print(f"killed {kill_at[1]} after {i + 1}", flush=True)
        i += 1
    print(f"sent {i}", flush=True)


def forked(addr, port, peer, pport, count, stage="parent", fd="-1"):
    count, dest = int(count), (peer, int(pport))

    def send(s, first):
        for i in range(first, first + count):
            s.sendto(f"{port}:{i:08d}".encode().ljust(64, b"."), dest)
            if i % 5 == 4:
                time.sleep(0.002)

    if stage == "parent":
        s = rds_socket(addr, int(port))
        send(s, 0)
        if os.fork() != 0:
            sys.exit(0)  # the daemon's parent leaves at once (a normal exit)
        send(s, count)
        os.set_inheritable(s.fileno(), True)
        os.execv(sys.executable, [sys.executable, os.path.abspath(__file__), "forked", addr,
                                  port, peer, pport, str(count), "exec", str(s.fileno())])
    s = socket.socket(fileno=int(fd))
    send(s, 2 * count)
    print(f"forked: sent {3 * count}", flush=True)
    # What the peer sent meanwhile waited in the socket through both hand-overs; the socket
    # stays open meanwhile (a close drops what the node has not acknowledged).
    collect(addr, port, 10, 30, s=s)
    s.close()


def fan(addr, base, nports, peer, pport, count, linger="0"):
    # The sockets stay open while lingering: closing an RDS socket drops what it
    # sent that is not yet acknowledged (kernel rds_release), here as on a node.
    socks = [rds_socket(addr, int(base) + i) for i in range(int(nports))]
    threads = [threading.Thread(target=stream,
                                args=(addr, int(base) + i, peer, pport, count, socks[i]))
               for i in range(int(nports))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"fanned {nports}x{count}", flush=True)
    time.sleep(float(linger))
    for s in socks:
        s.close()


def echo_stream(addr, port, peer, eport, rounds, cport, count):
    client(addr, str(int(port) + 100), peer, eport, "64", rounds)
    print("echoed", flush=True)
    stream(addr, port, peer, cport, count)


def collect(addr, port, idle, first=None, s=None):
    s = s or rds_socket(addr, int(port))
    s.settimeout(float(first or idle))
    print("ready", flush=True)
    seen = {}
    try:
        while True:
            data, src = s.recvfrom(1 << 16)
            s.settimeout(float(idle))
            sender, seq = data.rstrip(b".").decode().split(":")
            seen.setdefault(sender, []).append(int(seq))
    except socket.timeout:
        pass
    for sender, seqs in sorted(seen.items()):
        dups = len(seqs) - len(set(seqs))
        gaps = (max(seqs) + 1 - len(set(seqs)))
        order = "ok" if seqs == sorted(seqs) and dups == 0 else "bad"
        print(f"source {sender} n={len(set(seqs))} dups={dups} gaps={gaps} order={order}",
              flush=True)


SOL_RDS = 276
RDS_INFO_COUNTERS = 10000


def counter(s, name):
    """This host's RDS counter `name` (RDS_INFO_COUNTERS: 32-byte name, u64 value). Through libc
    (Python's getsockopt takes at most 1 KiB, the table is larger): the interposed call under the
    shim."""
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(1 << 16)
    length = ctypes.c_uint32(len(buf))
    if libc.getsockopt(s.fileno(), SOL_RDS, RDS_INFO_COUNTERS, buf, ctypes.byref(length)) < 0:
        return f"error {ctypes.get_errno()}"
    raw = buf.raw[:length.value]
    for off in range(0, len(raw) - 39, 40):
        n, v = struct.unpack_from("32sQ", raw, off)
        if n.rstrip(b"\0").decode() == name:
            return v
    return None


def ibinfo(addr, port):
    """Prints this host's RDS_INFO_IB_CONNECTIONS rows (struct rds_info_rdma_connection, 68
    bytes: addresses, GIDs, ring sizes), one "ib_conn SRC DST send_wr=N recv_wr=N sge=N gid=..."
    line each, or "ib_info error E"."""
    s = rds_socket(addr, int(port))
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(1 << 16)
    length = ctypes.c_uint32(len(buf))
    if libc.getsockopt(s.fileno(), SOL_RDS, 10008, buf, ctypes.byref(length)) < 0:
        print(f"ib_info error {ctypes.get_errno()}", flush=True)
        return
    raw = buf.raw[:length.value]
    for off in range(0, len(raw) - 67, 68):
        src, dst, sgid, dgid, swr, rwr, sge = struct.unpack_from("4s4s16s16sIII", raw, off)
        print(f"ib_conn {socket.inet_ntoa(src)} {socket.inet_ntoa(dst)} send_wr={swr} "
              f"recv_wr={rwr} sge={sge} gid={sgid.hex()}->{dgid.hex()}", flush=True)
    print(f"ib_info {len(raw) // 68} rows", flush=True)


def reset(addr, peer):
    """Drops this host's connection from ADDR to PEER (Oracle UEK's RDS_CONN_RESET: SOL_RDS
    option 8 with a 12-byte struct rds_reset; what was queued or unacknowledged goes again once
    it reconnects). Prints "reset"."""
    s = socket.socket(socket.AF_RDS, socket.SOCK_SEQPACKET, 0)
    s.setsockopt(SOL_RDS, 8, struct.pack("B3x4s4s", 0, socket.inet_aton(addr),
                                         socket.inet_aton(peer)))
    print("reset", flush=True)


def duplex(addr, port, peer, pport, count, idle, first=None):
    s = rds_socket(addr, int(port))
    t = threading.Thread(target=stream, args=(addr, port, peer, pport, count, s))
    t.start()
    collect(addr, port, idle, first, s=s)
    t.join()
    print(f"counter recv_drop_old_seq {counter(s, 'recv_drop_old_seq')}", flush=True)


def fill(addr, port, peer, pport):
    s = rds_socket(addr, int(port))
    s.setblocking(False)
    for i in range(200000):
        try:
            s.sendto(b"c" * 1024, (peer, int(pport)))
        except BlockingIOError:
            time.sleep(0.001)  # our own send buffer: the peer's TCP is slow, not congested
        except OSError as e:
            if e.errno == 105:  # ENOBUFS: the destination port is congested
                print(f"congested after {i}", flush=True)
                return
            raise
    print("FAIL never congested", flush=True)


def unblocked(addr, port, peer, pport, seconds):
    s = rds_socket(addr, int(port))
    s.setblocking(False)
    deadline = time.monotonic() + float(seconds)
    while time.monotonic() < deadline:
        try:
            s.sendto(b"u", (peer, int(pport)))
            print("uncongested", flush=True)
            return
        except OSError:
            time.sleep(0.05)
    print("FAIL still congested", flush=True)


def phased(addr, port, peer, pport, stopfile, n):
    s = rds_socket(addr, int(port))
    s.settimeout(0.2)
    dest = (peer, int(pport))

    def send(data):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                s.sendto(data, dest)
                return True
            except OSError:  # timed out (ETIMEDOUT/EAGAIN): the receiver is stalled or gone
                if data.startswith(b"o") and os.path.exists(stopfile):
                    return False
        return False
    i = 0
    while not os.path.exists(stopfile):
        if send(f"o:{i}".encode().ljust(1024, b".")):
            i += 1
    print(f"old {i}", flush=True)
    while not os.path.exists(stopfile + ".new"):
        time.sleep(0.05)
    for j in range(int(n)):
        send(f"n:{j}".encode().ljust(1024, b"."))
    print(f"new {n}", flush=True)


def stall(addr, port, count):
    s = rds_socket(addr, int(port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    print("ready", flush=True)
    for _ in range(int(count)):
        s.recv(1 << 16)
    print("stopping", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)


def tally(addr, port, idle):
    s = rds_socket(addr, int(port))
    s.settimeout(float(idle))
    print("ready", flush=True)
    old, new = [], []
    try:
        while True:
            kind, num = s.recv(1 << 16).rstrip(b".").decode().split(":")
            (old if kind == "o" else new).append(int(num))
    except socket.timeout:
        pass
    dups = len(new) - len(set(new))
    gaps = (max(new) + 1 - len(set(new))) if new else 0
    order = "ok" if new == sorted(new) and dups == 0 else "bad"
    contiguous = old == list(range(old[0], old[0] + len(old))) if old else True
    print(f"old n={len(old)} last={old[-1] if old else -1} "
          f"contiguous={'yes' if contiguous else 'no'}", flush=True)
    print(f"new n={len(set(new))} dups={dups} gaps={gaps} order={order}", flush=True)
    print(f"dropped {counter(s, 'recv_drop_old_seq')}", flush=True)


def sink(addr, port, rcvbuf, seconds):
    s = socket.socket(socket.AF_RDS, socket.SOCK_SEQPACKET, 0)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, int(rcvbuf))
    s.bind((addr, int(port)))
    print("ready", flush=True)
    time.sleep(float(seconds))
    s.settimeout(2)
    n = 0
    try:
        while True:
            s.recv(1 << 16)
            n += 1
    except socket.timeout:
        pass
    print(f"drained {n}", flush=True)


if __name__ == "__main__":
    {"server": server, "client": client, "ping": ping, "hold": hold, "stream": stream,
     "collect": collect, "echo_stream": echo_stream, "duplex": duplex, "fill": fill,
     "unblocked": unblocked, "sink": sink, "phased": phased, "stall": stall, "tally": tally,
     "fan": fan, "forked": forked, "ibinfo": ibinfo,
     "reset": reset}[sys.argv[1]](*sys.argv[2:])
