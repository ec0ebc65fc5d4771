#!/usr/bin/env python3
"""SDP sockets for rdsctl to show (run under the shim by test_sdp.py): a listener on loopback,
a client connected to it and the accepted socket, and a non-blocking connect to a closed port
whose failure the program read from SO_ERROR. Prints "ready PORT CLIENT_FD FAILED_FD", then
obeys lines on stdin: "close" closes the client, "exit" exits normally."""

import errno
import select
import socket
import sys

PROTO_SDP = 257

srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM, PROTO_SDP)
srv.bind(("127.0.0.1", 0))
srv.listen()
port = srv.getsockname()[1]
cli = socket.socket(socket.AF_INET, socket.SOCK_STREAM, PROTO_SDP)
cli.connect(("127.0.0.1", port))
conn, _ = srv.accept()

# A port nobody listens on: bind and close a socket to find one.
probe = socket.socket()
probe.bind(("127.0.0.1", 0))
closed_port = probe.getsockname()[1]
probe.close()
bad = socket.socket(socket.AF_INET, socket.SOCK_STREAM, PROTO_SDP)
bad.setblocking(False)
err = bad.connect_ex(("127.0.0.1", closed_port))
if err == errno.EINPROGRESS:
    select.select([], [bad], [], 10)
    err = bad.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
print(f"ready {port} {cli.fileno()} {bad.fileno()} {errno.errorcode.get(err, err)}", flush=True)

for line in sys.stdin:
    if line.strip() == "close":
        cli.close()
        print("closed", flush=True)
    elif line.strip() == "exit":
        break
