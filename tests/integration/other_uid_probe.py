"""Run as another uid (by test_other_uid.py, WITHOUT the shim): tries to open a same-host engine
link to another user's engine, plainly with an AF_UNIX stream socket.

  other_uid_probe.py PATH

Connects to PATH (<rundir>/engine-<pid>.sock), writes a few bytes shaped like the start of a
hello and waits up to 5 s for an answer. Prints one line:
  connect-failed ERRNO                 connect() itself failed
  closed-by-peer after_ms=X            the engine closed the connection without answering
  reset-by-peer after_ms=X             ECONNRESET (closed with our bytes unread)
  answered bytes=N                     the engine sent something: the link was NOT refused
  open-after-timeout                   neither closed nor answered within 5 s
"""

import errno
import socket
import sys
import time


def main():
    path = sys.argv[1]
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
    except OSError as e:
        print(f"connect-failed {errno.errorcode.get(e.errno, e.errno)}", flush=True)
        return 0
    t0 = time.monotonic()
    try:
        # 48 bytes: an RDS header of a handshake ping (sport 1, dport 0) with h_len 0.
        hdr = bytearray(48)
        hdr[20:22] = (1).to_bytes(2, "big")  # h_sport
        s.sendall(bytes(hdr))
    except OSError:
        pass  # the engine may already have closed it
    s.settimeout(5)
    try:
        data = s.recv(4096)
    except socket.timeout:
        print("open-after-timeout", flush=True)
        return 0
    except ConnectionResetError:
        print(f"reset-by-peer after_ms={(time.monotonic() - t0) * 1000:.0f}", flush=True)
        return 0
    if data:
        print(f"answered bytes={len(data)}", flush=True)
    else:
        print(f"closed-by-peer after_ms={(time.monotonic() - t0) * 1000:.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
