"""Runs under LD_PRELOAD (started by test_rdsctl.py): an RDS process driven line by line on stdin,
so the driver knows exactly what it did when it compares rdsctl's view with it.

Commands (one per line) and answers:
  comm NAME                           -> "comm NAME"          (prctl PR_SET_NAME)
  commhex HEX                         -> "comm HEX"           (the same, name given in hex)
  bind NAME ADDR PORT                 -> "bound NAME ADDR PORT" (PORT 0: the chosen one)
  send NAME DADDR DPORT COUNT SIZE    -> "sent NAME COUNT"
  recv NAME COUNT                     -> "received NAME COUNT"  (blocking, 10 s timeout)
  bindmany COUNT ADDR                 -> "boundmany COUNT"      (COUNT sockets, chosen ports)
  quit                                -> exits 0
Errors print "error ..." and exit 1. Starts with "ready PID".
"""

import ctypes
import os
import resource
import socket
import sys

socks = {}


def main():
    print(f"ready {os.getpid()}", flush=True)
    for line in sys.stdin:
        w = line.split()
        if not w:
            continue
        cmd = w[0]
        if cmd == "quit":
            return 0
        if cmd in ("comm", "commhex"):
            libc = ctypes.CDLL(None, use_errno=True)
            arg = line[len(cmd) + 1:].rstrip("\n")
            name = bytes.fromhex(arg) if cmd == "commhex" else arg.encode()
            if libc.prctl(15, ctypes.c_char_p(name), 0, 0, 0) != 0:  # PR_SET_NAME
                print(f"error prctl: {os.strerror(ctypes.get_errno())}", flush=True)
                return 1
            print(f"comm {arg}", flush=True)
        elif cmd == "bind":
            name, addr, port = w[1], w[2], int(w[3])
            s = socket.socket(socket.AF_RDS, socket.SOCK_SEQPACKET, 0)
            s.bind((addr, port))
            s.settimeout(10)
            socks[name] = s
            print(f"bound {name} {addr} {s.getsockname()[1]}", flush=True)
        elif cmd == "bindmany":
            count, addr = int(w[1]), w[2]
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            if soft < count + 256:
                resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, count + 256), hard))
            for i in range(count):
                s = socket.socket(socket.AF_RDS, socket.SOCK_SEQPACKET, 0)
                s.bind((addr, 0))
                socks[f"many{i}"] = s
            print(f"boundmany {count}", flush=True)
        elif cmd == "send":
            name, daddr, dport, count, size = w[1], w[2], int(w[3]), int(w[4]), int(w[5])
            for i in range(count):
                socks[name].sendto(bytes([i % 256]) * size, (daddr, dport))
            print(f"sent {name} {count}", flush=True)
        elif cmd == "recv":
            name, count = w[1], int(w[2])
            for _ in range(count):
                socks[name].recvfrom(1 << 20)
            print(f"received {name} {count}", flush=True)
        else:
            print(f"error unknown command {cmd}", flush=True)
            return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # reported to the driver as a line
        print(f"error {type(e).__name__}: {e}", flush=True)
        sys.exit(1)
