#!/usr/bin/env python3
"""SDP stream echo for the VM tests (tests/vm/sdp_verbs.sh), run with or without the shim.

  sdp_echo.py server ADDR PORT COUNT [tcp|pause SECONDS]
                                             serves COUNT connections: reads each stream to its
                                             end (after SECONDS: a reader that stops), answers
                                             with the same bytes and its SHA-256, then closes;
                                             prints each peer and digest
  sdp_echo.py client ADDR PORT PEER PEER_PORT SIZE [tcp] [nb|timeout] [again]
                                             (nb: a non-blocking connect waited for with
                                             select and SO_ERROR; timeout: CPython's
                                             settimeout, non-blocking inside; again: a
                                             second connection from the same process;
                                             closerange: os.closerange over every fd above
                                             the socket's once connected, as daemons do)
                                             sends SIZE patterned bytes (and one urgent byte
                                             in the middle, which the server's stream loses,
                                             as over TCP), half-closes, reads the echo;
                                             prints "ok ..." or "FAIL ..."

  sdp_echo.py blast ADDR PORT SIZE            accepts one connection, writes SIZE patterned bytes
                                             and leaves at once with os._exit (no close)
  sdp_echo.py drain PEER PEER_PORT SIZE       connects, reads to the end: prints "ok"/"FAIL"
  sdp_echo.py sleepy ADDR PORT                accepts one connection and never reads it
  sdp_echo.py flood PEER PEER_PORT            writes to it until an error: prints the errno

Sockets are socket(AF_INET, SOCK_STREAM, 257) (the sdp(7D) form) unless "tcp" is given (an
ordinary TCP socket, for a peer without the shim or a socket converted by rules).
"""
import errno
import hashlib
import os
import select
import socket
import sys
import time

PROTO_SDP = 257


def make(tcp):
    return socket.socket(socket.AF_INET, socket.SOCK_STREAM, 0 if tcp else PROTO_SDP)


def pattern(n):
    return bytes((i * 131 + 7) % 251 for i in range(n))


def read_all(s):
    chunks = []
    while True:
        b = s.recv(1 << 16)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


def server(addr, port, count, tcp, pause=0):
    ls = make(tcp)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((addr, port))
    ls.listen(8)
    print("ready", flush=True)
    for _ in range(count):
        c, peer = ls.accept()
        time.sleep(pause)  # a reader that stops: the writer runs out of credits and waits
        data = read_all(c)
        digest = hashlib.sha256(data).hexdigest()
        c.sendall(data + digest.encode())
        name = c.getsockname()
        c.close()
        print(f"served {peer[0]}:{peer[1]} local {name[0]}:{name[1]} bytes {len(data)} "
              f"sha {digest[:16]}", flush=True)


def client(addr, port, peer, peer_port, size, how):
    s = make("tcp" in how)
    if addr != "-":
        s.bind((addr, port))
    try:
        if "nb" in how:  # a non-blocking connect, as event loops make it
            s.setblocking(False)
            err = s.connect_ex((peer, peer_port))
            if err != errno.EINPROGRESS:
                raise OSError(err, "connect_ex")
            if select.select([], [s], [], 60)[1] != [s]:
                raise OSError(errno.ETIMEDOUT, "no POLLOUT")
            err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                raise OSError(err, "SO_ERROR")
            s.setblocking(True)
        elif "timeout" in how:  # CPython: a timeout makes the socket non-blocking inside
            s.settimeout(60)
            s.connect((peer, peer_port))
        else:
            s.connect((peer, peer_port))
    except OSError as e:
        print(f"error {errno.errorcode.get(e.errno, e.errno)}", flush=True)
        return False
    if "closerange" in how:  # the shim's own fds (the relay's) are not the program's to close
        os.closerange(s.fileno() + 1, 1 << 20)
    name, got_peer = s.getsockname(), s.getpeername()
    data = pattern(size)
    half = size // 2
    s.sendall(data[:half])
    s.send(b"!", socket.MSG_OOB)  # out of band at the server (no SO_OOBINLINE): not echoed
    s.sendall(data[half:])
    s.shutdown(socket.SHUT_WR)
    back = read_all(s)
    s.close()
    # The server reads with SO_OOBINLINE off: as over TCP, the urgent byte leaves its stream.
    want = data + hashlib.sha256(data).hexdigest().encode()
    verdict = "ok" if back == want else "FAIL"
    print(f"{verdict} size {size} got {len(back)} name {name[0]}:{name[1]} "
          f"peer {got_peer[0]}:{got_peer[1]}", flush=True)
    return verdict == "ok"


def blast(addr, port, size):
    """Writes `size` bytes to one client and exits at once: the shim must deliver them first."""
    ls = make(False)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((addr, port))
    ls.listen(1)
    print("ready", flush=True)
    c, _ = ls.accept()
    c.sendall(pattern(size))
    print("written", flush=True)
    os._exit(0)


def drain(peer, peer_port, size):
    s = make(False)
    s.connect((peer, peer_port))
    got = read_all(s)
    want = pattern(size)
    verdict = "ok" if got == want else "FAIL"
    print(f"{verdict} drained {len(got)} of {size}", flush=True)
    return verdict == "ok"


def sleepy(addr, port):
    """Accepts one connection and never reads it (until killed)."""
    ls = make(False)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((addr, port))
    ls.listen(1)
    print("ready", flush=True)
    c, _ = ls.accept()
    print("accepted", flush=True)
    time.sleep(300)


def flood(peer, peer_port):
    """Writes to a reader that never reads (until it dies): the error the writer gets."""
    s = make(False)
    s.connect((peer, peer_port))
    block = b"x" * 65536
    sent = 0
    try:
        while True:
            sent += s.send(block)
    except OSError as e:
        print(f"error {errno.errorcode.get(e.errno, e.errno)} after {sent} bytes", flush=True)


def main():
    a = sys.argv[1:]
    if a[0] == "blast":
        blast(a[1], int(a[2]), int(a[3]))
        return 0
    if a[0] == "drain":
        return 0 if drain(a[1], int(a[2]), int(a[3])) else 1
    if a[0] == "sleepy":
        sleepy(a[1], int(a[2]))
        return 0
    if a[0] == "flood":
        flood(a[1], int(a[2]))
        return 0
    if a[0] == "server":
        pause = float(a[5]) if a[4:5] == ["pause"] else 0
        server(a[1], int(a[2]), int(a[3]), a[4:] == ["tcp"], pause)
        return 0
    rounds = 2 if "again" in a[6:] else 1  # "again": a second connection from this process
    ok = all([client(a[1], int(a[2]), a[3], int(a[4]), int(a[5]), a[6:]) for _ in range(rounds)])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
