#!/usr/bin/env python3
"""The congestion map on the wire, seen by a plain TCP client that plays a shim engine.

In a private network namespace with 10.80.R.1 and 10.80.R.2 on lo:
  * RCV: a preloaded CPython process (cong_wire_peer.py receiver) binds 10.80.R.1:<port> with
    SO_RCVBUF 4096 (RDS rcvbuf 4096) and does not read. Being the first preloaded process in the
    namespace, its engine listens on the rendezvous port 16385.
  * The driver itself (NOT preloaded; its socket is created inside the namespace with setns)
    connects from 10.80.R.2 to 10.80.R.1:16385 and sends a shim link hello (DESIGN.md §3.1;
    byte layout of engine/control.cc EncodeHello and engine/wire.cc Encode): a handshake-ping-shaped
    header (sport 1, dport 0, extension headers NPATHS=1, GEN_NUM, 0x20) followed by the hello
    body (magic "RDSPRELD", version 1, kind 1 = kLink, its own made-up engine pid and generation,
    the link's from/to addresses as v4-mapped IPv6 + scope, target_pid = RCV's pid, ns key zero,
    query port 0, answer pid 0, resume ack 0).
  * It checks the hello reply (sport 0, dport 1, kind 3 = kReply, result 0 = accept,
    pid = RCV's pid), then decodes every message the engine sends on the link.

Checks (kernel-rds.md §B.1, §B.3, §C.2, §C.3):
  1. The first message after the reply is a congestion map: 48-byte big-endian header with
     h_sequence 0, h_ack 0, h_len 8192, h_sport 0, h_dport 0, h_flags exactly 0x01, h_credit 0,
     padding 0, h_csum 0, no extension header; 8192 bytes of bitmap, all clear.
  2. A second preloaded process (cong_wire_peer.py sender, bound to 10.80.R.1:<other port>) sends
     1 KiB messages to RCV's port until it gets ENOBUFS (RCV's queue went above 4096 bytes, §B.2).
     The next message on the link is a map with exactly RCV's port set, decoded with the kernel's
     little-endian bit order (port p = byte p >> 3, bit p & 7), so a wrong bit or byte order fails.
  3. RCV drains its queue (below half its rcvbuf, §B.2 hysteresis): the next map is all clear.
  Nothing but congestion maps arrives on the link meanwhile (the driver sends no data).

Needs root and `ip netns` (else skipped, exit 77). Expected run time: ~2 s.
"""

import ctypes
import os
import random
import socket
import struct
import sys
import unittest

import itlib

HEADER = struct.Struct(">QQIHHBB4sH16s")  # struct rds_header, 48 bytes
assert HEADER.size == 48
CONG_MAP_BYTES = 8192
RCVBUF = 4096
MSG_SIZE = 1024
TCP_PORT = 16385
STEP_TIMEOUT = 8.0

EXT_NPATHS, EXT_GEN_NUM, EXT_SHIM_HELLO = 5, 6, 0x20
HELLO_MAGIC = b"RDSPRELD"
KIND_LINK, KIND_REPLY = 1, 3
RESULT_ACCEPT = 0

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def socket_in_netns(ns):
    """A TCP socket created inside network namespace `ns` (this thread switches there and back)."""
    path = f"/run/netns/{ns}"
    if not os.path.exists(path):
        path = f"/var/run/netns/{ns}"
    with open("/proc/thread-self/ns/net") as own, open(path) as target:
        if _libc.setns(target.fileno(), CLONE_NEWNET) != 0:
            e = ctypes.get_errno()
            raise AssertionError(f"setns({ns}): {os.strerror(e)}")
        try:
            return socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        finally:
            if _libc.setns(own.fileno(), CLONE_NEWNET) != 0:
                itlib.log("*** cannot return to the driver's network namespace")
                itlib.CLEANUP.run()
                os._exit(1)


def mapped(ip):
    return b"\0" * 10 + b"\xff\xff" + socket.inet_aton(ip)


def encode_hello(pid, gen, from_ip, to_ip, target_pid):
    ext = bytes([EXT_NPATHS]) + struct.pack(">H", 1)
    ext += bytes([EXT_GEN_NUM]) + struct.pack(">I", gen)
    ext += bytes([EXT_SHIM_HELLO, 0])
    ext = ext.ljust(16, b"\0")
    body = HELLO_MAGIC + struct.pack(">HHHIIIQQ", 1, KIND_LINK, RESULT_ACCEPT, pid, gen,
                                     os.getuid(), 0, 0)
    body += mapped(from_ip) + struct.pack(">I", 0) + mapped(to_ip) + struct.pack(">I", 0)
    body += struct.pack(">IHI", target_pid, 0, 0)
    body += struct.pack(">Q", 0)  # resume ack (optional trailing field): nothing received yet
    header = HEADER.pack(0, 0, len(body), 1, 0, 0, 0, b"\0" * 4, 0, ext)
    return header + body


def recv_exact(sock, n):
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise AssertionError(f"the engine closed the link after {len(out)} of {n} bytes")
        out += chunk
    return out


class Msg:
    def __init__(self, raw_header, payload):
        (self.seq, self.ack, self.len, self.sport, self.dport, self.flags, self.credit,
         self.padding, self.csum, self.exthdr) = HEADER.unpack(raw_header)
        self.payload = payload

    def describe(self):
        return (f"seq {self.seq} ack {self.ack} len {self.len} sport {self.sport} dport "
                f"{self.dport} flags {self.flags:#04x} credit {self.credit} padding "
                f"{self.padding.hex()} csum {self.csum} exthdr {self.exthdr.hex()}")

    def congested_ports(self):
        """Ports whose bit is set, kernel bit order: port p = byte p >> 3, bit p & 7."""
        ports = []
        for i, byte in enumerate(self.payload):
            if byte:
                ports += [i * 8 + b for b in range(8) if byte >> b & 1]
        return ports


def read_msg(sock, timeout):
    sock.settimeout(timeout)
    try:
        raw = recv_exact(sock, HEADER.size)
        h = Msg(raw, b"")
        if h.len > (1 << 20) + CONG_MAP_BYTES:
            raise AssertionError(f"absurd h_len in {h.describe()}")
        h.payload = recv_exact(sock, h.len)
        return h
    except socket.timeout:
        return None


class CongestionMapOnTheWire(unittest.TestCase):
    def expect_map(self, sock, want_ports, what):
        m = read_msg(sock, STEP_TIMEOUT)
        self.assertIsNotNone(m, f"{what}: no message on the link within {STEP_TIMEOUT} s")
        self.assertEqual(m.flags, 0x01, f"{what}: not a congestion map: {m.describe()}")
        self.assertEqual((m.seq, m.ack, m.len, m.sport, m.dport, m.credit, m.padding, m.csum,
                          m.exthdr),
                         (0, 0, CONG_MAP_BYTES, 0, 0, 0, b"\0" * 4, 0, b"\0" * 16),
                         f"{what}: map header {m.describe()}")
        self.assertEqual(len(m.payload), CONG_MAP_BYTES)
        self.assertEqual(m.congested_ports(), sorted(want_ports),
                         f"{what}: congested ports in the map")
        return m

    def test_congestion_map_sent_on_a_shim_link(self):
        itlib.require_netns()
        tag = itlib.unique_tag()
        r = random.randrange(1, 255)
        ns = itlib.add_netns(f"rdsit{tag}w")
        ip1, ip2 = f"10.80.{r}.1", f"10.80.{r}.2"
        itlib.sh("ip", "-n", ns, "addr", "add", f"{ip1}/32", "dev", "lo")
        itlib.sh("ip", "-n", ns, "addr", "add", f"{ip2}/32", "dev", "lo")
        rundir = itlib.make_tmpdir("congwire")
        helper = itlib.script("cong_wire_peer.py")

        rcv = itlib.Proc("RCV", [sys.executable, helper, "receiver", ip1, RCVBUF], rundir,
                         netns=ns)
        _, port, rcv_pid = rcv.expect("bound", 20).split()
        port, rcv_pid = int(port), int(rcv_pid)
        self.assertEqual(rcv_pid, rcv.pid)
        itlib.log(f"receiver pid {rcv_pid} bound {ip1}:{port}")

        link = socket_in_netns(ns)
        try:
            link.bind((ip2, 0))
            link.settimeout(STEP_TIMEOUT)
            link.connect((ip1, TCP_PORT))
            my_pid = random.randrange(1 << 30, 1 << 31)  # a made-up engine: no such process
            my_gen = random.randrange(1, 1 << 32)
            link.sendall(encode_hello(my_pid, my_gen, ip2, ip1, rcv_pid))

            # The hello reply.
            reply = read_msg(link, STEP_TIMEOUT)
            self.assertIsNotNone(reply, "no hello reply")
            self.assertEqual((reply.sport, reply.dport, reply.flags), (0, 1, 0),
                             f"hello reply header: {reply.describe()}")
            self.assertIn(bytes([EXT_SHIM_HELLO]), reply.exthdr, reply.describe())
            self.assertEqual(reply.payload[:8], HELLO_MAGIC)
            version, kind, result, pid = struct.unpack(">HHHI", reply.payload[8:18])
            self.assertEqual((version, kind, result, pid), (1, KIND_REPLY, RESULT_ACCEPT, rcv_pid),
                             "hello reply: (version, kind, result, pid)")

            # 1. The first message: the full map, nothing congested.
            self.expect_map(link, [], "first message on the link")

            # 2. Congest the receiver's port from another preloaded process.
            snd = itlib.Proc("SND", [sys.executable, helper, "sender", ip1], rundir, netns=ns)
            snd.expect("bound", 20)
            snd.send(f"fill {ip1} {port} {MSG_SIZE} 64")
            filled = snd.expect("filled", 20).split()
            self.assertEqual(filled[4], "1", f"the sender never got ENOBUFS: {filled}\n"
                             f"{snd.diag()}")
            self.assertGreater(int(filled[2]) * MSG_SIZE, RCVBUF,
                               f"ENOBUFS before the receiver's rcvbuf could be exceeded: {filled}")
            self.expect_map(link, [port], "after the receiver's port became congested")

            # 3. Drain: uncongested.
            rcv.send("drain")
            drained = rcv.expect("drained", 20).split()
            self.assertEqual(int(drained[1]), int(filled[2]), f"receiver drained {drained}")
            self.expect_map(link, [], "after the receiver drained its queue")

            # Nothing else follows.
            extra = read_msg(link, 0.5)
            self.assertIsNone(extra, f"unexpected message: {extra.describe() if extra else ''}")
        finally:
            link.close()
        for p in (rcv, snd):
            p.send("quit")
            self.assertEqual(p.wait(20), 0, p.diag())


if __name__ == "__main__":
    itlib.run_tests(limit_seconds=60)
