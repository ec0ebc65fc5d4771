#!/usr/bin/env python3
"""SDP sockets from CPython, as a program would use them (run under the shim by test_sdp.py):
socket.socket(AF_INET / AF_INET6, SOCK_STREAM, 257) — the specification's form — with a thread
per connection, with asyncio streams, with selectors (non-blocking), with urgent data, and across
os.fork(). Prints "ok ..." per check, "FAIL ..." otherwise."""

import asyncio
import os
import selectors
import signal
import socket
import sys
import threading
import time

PROTO_SDP = 257
failures = 0


def check(ok, what):
    global failures
    print(("ok " if ok else "FAIL ") + what, flush=True)
    failures += 0 if ok else 1


def sdp(family=socket.AF_INET):
    return socket.socket(family, socket.SOCK_STREAM, PROTO_SDP)


def listener(family=socket.AF_INET):
    s = sdp(family)
    s.bind(("::1" if family == socket.AF_INET6 else "127.0.0.1", 0))
    s.listen()
    return s


def echo_forever(conn):
    with conn:
        while data := conn.recv(65536):
            conn.sendall(data)


def threaded(family):
    srv = listener(family)
    check(srv.family == family and srv.getsockname()[1] > 0, f"listener {srv.getsockname()}")
    threading.Thread(target=lambda: echo_forever(srv.accept()[0]), daemon=True).start()
    c = sdp(family)
    c.connect(srv.getsockname()[:2])
    payload = bytes(range(256)) * 1024
    c.sendall(payload)
    c.shutdown(socket.SHUT_WR)
    got = b""
    while chunk := c.recv(65536):
        got += chunk
    check(got == payload, f"thread echo of {len(payload)} bytes over {family.name}")
    c.close()
    srv.close()


async def asyncio_streams():
    srv_sock = listener()

    async def handle(reader, writer):
        try:
            while data := await reader.read(4096):
                writer.write(data[::-1])
                await writer.drain()
        finally:
            writer.close()

    server = await asyncio.start_server(handle, sock=srv_sock)
    c = sdp()
    # Connected before asyncio takes it: loop.sock_connect resolves the address with
    # getaddrinfo(proto=257), which glibc refuses (EAI_SOCKTYPE) — DESIGN.md §11.
    await asyncio.to_thread(c.connect, srv_sock.getsockname())
    c.setblocking(False)
    reader, writer = await asyncio.open_connection(sock=c)
    answers = []
    for word in (b"alpha", b"beta", b"gamma"):
        writer.write(word)
        await writer.drain()
        answers.append(await reader.readexactly(len(word)))
    check(answers == [b"ahpla", b"ateb", b"ammag"], f"asyncio streams: {answers}")
    writer.close()
    await writer.wait_closed()
    server.close()
    await server.wait_closed()


def selector_nonblocking():
    srv = listener()
    c = sdp()
    c.setblocking(False)
    err = c.connect_ex(srv.getsockname())
    check(err in (0, 115), f"non-blocking connect: {os.strerror(err) if err else 0}")  # EINPROGRESS
    sel = selectors.DefaultSelector()
    sel.register(c, selectors.EVENT_WRITE)
    check(bool(sel.select(5)), "writable once connected")
    conn, _ = srv.accept()
    sel.modify(c, selectors.EVENT_READ)
    check(sel.select(0) == [], "nothing to read yet")
    conn.sendall(b"ping")
    check(bool(sel.select(5)) and c.recv(10) == b"ping", "readable with the data")
    conn.send(b"!", socket.MSG_OOB)
    conn.sendall(b"after")
    sel.close()
    c.setblocking(True)  # (no timeout: CPython would wait for POLLIN before recv(MSG_OOB))
    time.sleep(0.2)
    oob = c.recv(1, socket.MSG_OOB)
    got = b""
    while len(got) < 5:
        got += c.recv(10)
    check(oob == b"!" and got == b"after", f"urgent byte {oob} apart from the stream {got}")
    c.close()
    conn.close()
    srv.close()


def across_fork():
    srv = listener()
    port = srv.getsockname()[1]
    pid = os.fork()
    if pid == 0:  # the child serves one connection on the inherited listener
        try:
            echo_forever(srv.accept()[0])
        finally:
            os._exit(0)
    srv.close()
    c = sdp()
    c.connect(("127.0.0.1", port))
    c.sendall(b"from the parent")
    c.shutdown(socket.SHUT_WR)
    check(c.recv(100) == b"from the parent", "a forked child serves the inherited SDP listener")
    c.close()
    _, status = os.waitpid(pid, 0)
    check(status == 0, f"the child exited {status}")


signal.alarm(40)
threaded(socket.AF_INET)
threaded(socket.AF_INET6)
asyncio.run(asyncio_streams())
selector_nonblocking()
across_fork()
sys.exit(1 if failures else 0)
