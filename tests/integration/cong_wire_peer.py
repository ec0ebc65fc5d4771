"""Runs under LD_PRELOAD (started by test_cong_map_wire.py): one AF_RDS socket driven by stdin.

  cong_wire_peer.py receiver ADDR RCVBUF   bind ADDR:0 with SO_RCVBUF RCVBUF, print
                                            "bound <port> <pid>", then never read until told
  cong_wire_peer.py sender ADDR            bind ADDR:0, print "bound <port> <pid>"

Commands (one per line), replies on stdout:
  fill ADDR PORT SIZE MAX   (sender) sends SIZE-byte messages with MSG_DONTWAIT to ADDR:PORT,
                            10 ms apart, until sendto fails with ENOBUFS or MAX were sent:
                            "filled sent <n> enobufs <0|1>"  (other errors: "error ...")
  drain                     (receiver) receives with MSG_DONTWAIT until EAGAIN:
                            "drained <n> bytes <b>"
  quit / EOF                exit 0
Prints "fatal ..." and exits 2 if the shim is not loaded.
"""

import errno
import os
import socket
import sys
import time


def say(*a):
    print(*a, flush=True)


def shim_loaded():
    """Every LD_PRELOAD entry (the shim, and a sanitizer runtime before it in such builds) is
    mapped: otherwise socket(AF_RDS) would silently be the kernel's."""
    entries = [e for e in os.environ.get("LD_PRELOAD", "").replace(" ", ":").split(":") if e]
    if not entries:
        return False
    with open("/proc/self/maps") as f:
        maps = [line.rstrip("\n") for line in f]
    for e in entries:
        want = os.path.realpath(e) if "/" in e else "/" + e
        if not any(m.endswith(want) for m in maps):
            return False
    return True


def main():
    if not shim_loaded():
        say("fatal the RDS shim is not loaded (LD_PRELOAD)")
        return 2
    role, addr = sys.argv[1], sys.argv[2]
    s = socket.socket(socket.AF_RDS, socket.SOCK_SEQPACKET, 0)
    if role == "receiver":
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, int(sys.argv[3]))
    s.bind((addr, 0))
    say(f"bound {s.getsockname()[1]} {os.getpid()}")
    for line in sys.stdin:
        w = line.split()
        if not w:
            continue
        if w[0] == "quit":
            break
        if w[0] == "fill":
            dest, size, limit = (w[1], int(w[2])), int(w[3]), int(w[4])
            sent, enobufs = 0, 0
            payload = b"c" * size
            while sent < limit:
                try:
                    s.sendto(payload, socket.MSG_DONTWAIT, dest)
                    sent += 1
                except OSError as e:
                    if e.errno == errno.ENOBUFS:
                        enobufs = 1
                        break
                    say(f"error sendto {errno.errorcode.get(e.errno, e.errno)}")
                    break
                time.sleep(0.01)
            say(f"filled sent {sent} enobufs {enobufs}")
        elif w[0] == "drain":
            n = b = 0
            while True:
                try:
                    b += len(s.recv(1 << 20, socket.MSG_DONTWAIT))
                    n += 1
                except BlockingIOError:
                    break
            say(f"drained {n} bytes {b}")
        else:
            say(f"error unknown command {w[0]}")
    s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
