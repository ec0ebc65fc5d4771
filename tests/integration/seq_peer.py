"""Sequence-numbered RDS traffic for the kill -9 and other-uid tests (runs under LD_PRELOAD).

Plain CPython socket code on socket.AF_RDS. stdin carries commands, stdout the replies (one
line each, see itlib.Proc).

  seq_peer.py recv --bind IP:PORT [--rcvbuf B] [--paused] [--bind-on-go]
      Receives and records, per sender tag, the sequence numbers in arrival order as runs
      (a run is a maximal stretch of consecutive numbers; a duplicate or reordered message
      starts a new run). Startup prints "bound IP:PORT", or "ready" with --bind-on-go (then
      "go" binds: "bound IP:PORT" or "bind-error ERRNO").
      --paused: nothing is read until "resume" (the queue fills: congestion for senders).
      Commands: resume | pause | count -> "count TAG=N ... total=N"
                runs -> "runs TAG src=IP:PORT a-b,c-d,..." per tag, then "runs-end"
                counters -> "counters name=value ..." | quit

  seq_peer.py send --bind IP:PORT --dest IP:PORT --tag TAG [--size B] [--sndbuf B]
                   [--interval-us U] [--count N]
      A blocking socket; after "go" a thread sends message 0, 1, 2, ... (payload: b"SEQP",
      the tag in 8 bytes, the number as u64 little-endian, filler up to --size) until "stop"
      or --count messages. Startup prints "bound IP:PORT" (or "bind-error ERRNO").
      Commands: go
                mark  -> "mark started=S completed=C" (S = sendto calls begun, C = returned:
                         every call numbered < C returned before the mark; every call numbered
                         >= S begins after it)
                state -> "state started=S completed=C blocked_ms=X ok=N errors=E failed=..."
                         (blocked_ms: how long the call in progress has been running, 0 if none)
                stop  -> "stopped started=S completed=C ok=N errors=E failed=..." once the
                         sending thread has finished its last call
                counters | quit (the socket stays open until quit)
      failed lists the numbers whose sendto raised, as "n:ERRNO" (at most 20).
"""

import argparse
import ctypes
import errno
import os
import socket
import struct
import sys
import threading
import time

SOL_RDS = 276
RDS_INFO_COUNTERS = 10000
MAGIC = b"SEQP"
HDR = struct.Struct("<4s8sQ")

out_lock = threading.Lock()


def say(line):
    with out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def addr_of(text):
    host, port = text.rsplit(":", 1)
    return host, int(port)


def fmt_addr(a):
    return f"{a[0]}:{a[1]}"


def errname(e):
    return errno.errorcode.get(e, str(e))


def counters_line(s):
    """getsockopt(SOL_RDS, RDS_INFO_COUNTERS) through libc (socket.getsockopt caps buflen at
    1024 bytes, less than the counters take); the shim's getsockopt is the one found first."""
    libc = ctypes.CDLL(None, use_errno=True)
    size = 40 * 128
    for _ in range(8):
        buf = ctypes.create_string_buffer(size)
        length = ctypes.c_uint32(size)
        r = libc.getsockopt(s.fileno(), SOL_RDS, RDS_INFO_COUNTERS, buf, ctypes.byref(length))
        if r < 0:
            e = ctypes.get_errno()
            if e == errno.ENOSPC and length.value > size:
                size = length.value
                continue
            return f"counters-error {errname(e)}"
        raw = buf.raw[:length.value]
        items = []
        for off in range(0, len(raw) - 39, 40):
            name = raw[off:off + 32].split(b"\0", 1)[0].decode(errors="replace")
            value = struct.unpack_from("<Q", raw, off + 32)[0]
            items.append(f"{name}={value}")
        return "counters " + " ".join(items)
    return "counters-error ENOSPC-loop"


def rds_socket():
    return socket.socket(socket.AF_RDS, socket.SOCK_SEQPACKET, 0)


def commands():
    for line in sys.stdin:
        line = line.strip()
        if line:
            yield line


# ------------------------------------------------------------------------------------------
# Receiver

class Receiver:
    def __init__(self, args):
        self.args = args
        self.sock = rds_socket()
        if args.rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, args.rcvbuf)
        self.lock = threading.Lock()
        self.runs = {}      # tag -> [[first, last], ...]
        self.src = {}       # tag -> sender address
        self.counts = {}    # tag -> messages
        self.other = 0      # messages that are not ours
        self.paused = threading.Event()
        if args.paused:
            self.paused.set()
        self.bound = threading.Event()
        self.closing = threading.Event()

    def bind(self):
        try:
            self.sock.bind(addr_of(self.args.bind))
        except OSError as e:
            say(f"bind-error {errname(e.errno)}")
            return False
        say(f"bound {fmt_addr(self.sock.getsockname())}")
        self.bound.set()
        return True

    def record(self, data, src):
        with self.lock:
            if len(data) < HDR.size or not data.startswith(MAGIC):
                self.other += 1
                return
            _, tag, seq = HDR.unpack_from(data)
            tag = tag.rstrip(b"\0").decode(errors="replace")
            self.src.setdefault(tag, fmt_addr(src))
            self.counts[tag] = self.counts.get(tag, 0) + 1
            runs = self.runs.setdefault(tag, [])
            if runs and runs[-1][1] + 1 == seq:
                runs[-1][1] = seq
            else:
                runs.append([seq, seq])

    def loop(self):
        while not self.bound.wait(0.1):
            if self.closing.is_set():
                return
        self.sock.settimeout(0.1)
        while not self.closing.is_set():
            if self.paused.is_set():
                time.sleep(0.01)
                continue
            try:
                data, src = self.sock.recvfrom(70000)
            except (socket.timeout, BlockingIOError, InterruptedError):
                continue
            except OSError as e:
                say(f"fatal recvfrom {errname(e.errno)}")
                os._exit(3)
            self.record(data, src)

    def run(self):
        if not self.args.bind_on_go:
            if not self.bind():
                return 4
        else:
            say("ready")
        reader = threading.Thread(target=self.loop, daemon=True)
        reader.start()
        for cmd in commands():
            if cmd == "go" and self.args.bind_on_go and not self.bound.is_set():
                if not self.bind():
                    return 4
            elif cmd == "resume":
                self.paused.clear()
                say("resumed")
            elif cmd == "pause":
                self.paused.set()
                say("paused")
            elif cmd == "count":
                with self.lock:
                    parts = [f"{t}={n}" for t, n in sorted(self.counts.items())]
                    total = sum(self.counts.values()) + self.other
                say("count " + " ".join(parts + [f"other={self.other}", f"total={total}"]))
            elif cmd == "runs":
                with self.lock:
                    for tag in sorted(self.runs):
                        text = ",".join(f"{a}-{b}" for a, b in self.runs[tag])
                        say(f"runs {tag} src={self.src[tag]} {text}")
                say("runs-end")
            elif cmd == "counters":
                say(counters_line(self.sock))
            elif cmd == "quit":
                break
            else:
                say(f"error unknown command {cmd}")
        self.closing.set()
        reader.join(5)
        self.sock.close()
        say("bye")
        return 0


# ------------------------------------------------------------------------------------------
# Sender

class Sender:
    def __init__(self, args):
        self.args = args
        self.sock = rds_socket()
        if args.sndbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, args.sndbuf)
        self.dest = addr_of(args.dest)
        self.tag = args.tag.encode()[:8].ljust(8, b"\0")
        self.lock = threading.Lock()
        self.started = 0
        self.completed = 0
        self.call_began = None
        self.ok = 0
        self.errors = {}
        self.failed = []
        self.stop = threading.Event()
        self.thread = None

    def loop(self):
        filler = b"x" * max(0, self.args.size - HDR.size)
        seq = 0
        interval = self.args.interval_us / 1e6
        while not self.stop.is_set() and (self.args.count == 0 or seq < self.args.count):
            payload = HDR.pack(MAGIC, self.tag, seq) + filler
            with self.lock:
                self.started = seq + 1
                self.call_began = time.monotonic()
            try:
                n = self.sock.sendto(payload, self.dest)
                err = None if n == len(payload) else f"short-{n}"
            except OSError as e:
                err = errname(e.errno)
            with self.lock:
                self.completed = seq + 1
                self.call_began = None
                if err is None:
                    self.ok += 1
                else:
                    self.errors[err] = self.errors.get(err, 0) + 1
                    if len(self.failed) < 20:
                        self.failed.append(f"{seq}:{err}")
            seq += 1
            if interval:
                time.sleep(interval)
        say("stopped " + self.summary())

    def summary(self):
        with self.lock:
            errs = ",".join(f"{k}:{v}" for k, v in sorted(self.errors.items())) or "none"
            failed = ",".join(self.failed) or "none"
            return (f"started={self.started} completed={self.completed} ok={self.ok} "
                    f"errors={errs} failed={failed}")

    def run(self):
        try:
            self.sock.bind(addr_of(self.args.bind))
        except OSError as e:
            say(f"bind-error {errname(e.errno)}")
            return 4
        say(f"bound {fmt_addr(self.sock.getsockname())}")
        for cmd in commands():
            if cmd == "go" and self.thread is None:
                self.thread = threading.Thread(target=self.loop, daemon=True)
                self.thread.start()
            elif cmd == "mark":
                with self.lock:
                    say(f"mark started={self.started} completed={self.completed}")
            elif cmd == "state":
                with self.lock:
                    began = self.call_began
                blocked = 0 if began is None else (time.monotonic() - began) * 1000
                say(f"state blocked_ms={blocked:.0f} " + self.summary())
            elif cmd == "stop":
                self.stop.set()
                if self.thread is None:
                    say("stopped " + self.summary())
            elif cmd == "counters":
                say(counters_line(self.sock))
            elif cmd == "quit":
                break
            else:
                say(f"error unknown command {cmd}")
        # A sending thread still blocked in sendto must not keep the process alive.
        sys.stdout.flush()
        os._exit(0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=("recv", "send"))
    ap.add_argument("--bind", required=True)
    ap.add_argument("--dest")
    ap.add_argument("--tag", default="s")
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--count", type=int, default=0)
    ap.add_argument("--interval-us", type=int, default=0)
    ap.add_argument("--sndbuf", type=int, default=0)
    ap.add_argument("--rcvbuf", type=int, default=0)
    ap.add_argument("--paused", action="store_true")
    ap.add_argument("--bind-on-go", action="store_true")
    args = ap.parse_args()
    if args.role == "send":
        if not args.dest:
            ap.error("send needs --dest")
        return Sender(args).run()
    return Receiver(args).run()


if __name__ == "__main__":
    sys.exit(main())
