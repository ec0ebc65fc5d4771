"""A plain (never preloaded) TCP client that sends garbage to an RDS rendezvous port.

usage: garbage_client.py HOST PORT

Each variant uses its own connection. For every variant it prints one line
    variant <name> strict <0|1> dropped <how>          (the peer closed or reset the connection)
    variant <name> strict <0|1> NOT-DROPPED <detail>   (still open after the wait)
and exits 0 (the driver judges). "strict" variants are invalid the moment their bytes arrive
(a header whose h_len is far beyond 1 MiB + 8 KiB, or no valid RDS header at all), so the
engine must drop them and count them in shim_conn_drop_bad_input. The truncated variants end
with a half-close; the engine must close them, but whether it counts them is not specified.
"""

import errno
import random
import socket
import struct
import sys
import time

WAIT = 5.0


def rds_header(seq, h_len, sport, dport, flags=0):
    """A 48-byte RDS header (kernel-rds.md §C.2), big-endian."""
    return struct.pack(">QQIHHBB4sH16s", seq, 0, h_len, sport, dport, flags, 0, b"\0" * 4, 0,
                       b"\0" * 16)


def variants():
    rnd = random.Random(16385)
    noise = bytearray(rnd.getrandbits(8) for _ in range(4096))
    noise[16] = 0xFF  # h_len >= 0xFF000000: certainly invalid
    http = b"GET / HTTP/1.1\r\nHost: rds\r\n\r\n".ljust(64, b" ")  # h_len = "Host"
    return [
        ("all-ones", True, b"\xff" * 64, False),
        ("http-request", True, http, False),
        ("random-4KiB", True, bytes(noise), False),
        ("handshake-ping-h_len-2MiB", True, rds_header(1, 2 * 1048576 + 1, 1, 0) + b"x" * 64, False),
        ("data-h_len-2GiB", True, rds_header(1, 0x80000000, 4000, 4000) + b"x" * 64, False),
        ("truncated-header", False, rds_header(1, 10, 1, 0)[:20], True),
        ("truncated-payload", False, rds_header(1, 1000, 1, 0) + b"y" * 100, True),
    ]


def run_variant(host, port, name, strict, data, half_close):
    s = socket.create_connection((host, port), timeout=WAIT)
    how = None
    try:
        try:
            s.sendall(data)
            if half_close:
                s.shutdown(socket.SHUT_WR)
        except OSError as e:
            how = f"send-{errno.errorcode.get(e.errno, e.errno)}"
        end = time.monotonic() + WAIT
        while how is None and time.monotonic() < end:
            s.settimeout(max(0.05, end - time.monotonic()))
            try:
                chunk = s.recv(65536)
                if not chunk:
                    how = "eof"
                # Bytes from the engine (e.g. a kernel-style handshake reply) are fine; keep
                # waiting for the close.
            except socket.timeout:
                break
            except OSError as e:
                how = f"recv-{errno.errorcode.get(e.errno, e.errno)}"
        if how is None:
            # Still open: probe once more by writing (an engine that closed turns this into RST).
            try:
                s.sendall(b"\xff" * 4096)
                time.sleep(0.2)
                s.sendall(b"\xff" * 4096)
            except OSError as e:
                how = f"late-{errno.errorcode.get(e.errno, e.errno)}"
    finally:
        s.close()
    tag = 1 if strict else 0
    if how:
        print(f"variant {name} strict {tag} dropped {how}", flush=True)
    else:
        print(f"variant {name} strict {tag} NOT-DROPPED still open after {WAIT:.0f} s", flush=True)


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    for name, strict, data, half_close in variants():
        try:
            run_variant(host, port, name, strict, data, half_close)
        except OSError as e:
            print(f"variant {name} strict {1 if strict else 0} CONNECT-FAILED "
                  f"{errno.errorcode.get(e.errno, e.errno)}", flush=True)
    print("garbage-done", flush=True)


if __name__ == "__main__":
    main()
