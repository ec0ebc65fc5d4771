#!/usr/bin/env python3
"""Ordinary TCP sockets converted to SDP by RDS_PRELOAD_SDP_CONFIG (test_sdp.py writes the rules:
servers stay TCP, clients to 127.0.0.1 become SDP): an echo over the converted client, which then
has the SDP options, while the listener has not. Prints "ok ..." per check."""

import socket
import sys
import threading

failures = 0


def check(ok, what):
    global failures
    print(("ok " if ok else "FAIL ") + what, flush=True)
    failures += 0 if ok else 1


srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen()


def echo():
    c, _ = srv.accept()
    c.sendall(c.recv(100))
    c.close()


t = threading.Thread(target=echo)
t.start()
c = socket.socket()
c.connect(srv.getsockname())
c.sendall(b"converted")
check(c.recv(100) == b"converted", "echo over the converted client")
check(c.getsockopt(socket.IPPROTO_TCP, 80) == 65536, "the client is an SDP socket (SDP_ZCOPY_THRESH)")
try:
    srv.getsockopt(socket.IPPROTO_TCP, 80)
    check(False, "the listener stayed TCP")
except OSError as e:
    check(e.errno == 92, f"the listener stayed TCP ({e.strerror})")  # ENOPROTOOPT
t.join()
sys.exit(1 if failures else 0)
