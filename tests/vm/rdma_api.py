#!/usr/bin/env python3
"""The RDMA API between a kernel rds_rdma node and a shim host (tests/vm/rdma_api.sh).

  rdma_api.py target    ME PORT PEER PEER_PORT   (the shim host: registers memory)
  rdma_api.py initiator ME PORT PEER PEER_PORT   (the kernel node: RDMA into it)

The target registers three regions at page-unaligned addresses (RDS_GET_MR, RDS_GET_MR_FOR_DEST,
and one USE_ONCE), checks the kernel's errors of memory registration, and sends their cookies to
the initiator with one of them as an RDMA_DEST control message. The initiator checks that
cookie, RDMA-writes one pattern into the first region and another into the use-once one, and
RDMA-reads the second (each with NOTIFY_ME: RDS_CMSG_RDMA_STATUS must say success); the target
checks what was written, that the use-once region was released by the message that used it,
and FREE_MR. Prints "RESULT <name> <verdict…>" lines.
"""

import ctypes
import errno
import socket
import struct
import sys

SOL_RDS = 276
RDS_GET_MR, RDS_FREE_MR, RDS_GET_MR_FOR_DEST = 2, 3, 7
CMSG_RDMA_ARGS, CMSG_RDMA_DEST, CMSG_RDMA_STATUS = 1, 2, 4
READWRITE, FENCE, USE_ONCE, NOTIFY_ME = 0x1, 0x2, 0x8, 0x20
N = 10000  # three pages touched from an unaligned start
PAGE = 4096


def pattern(seed, n=N):
    return bytes((i * seed + (i >> 8) + seed) & 0xFF for i in range(n))


def result(name, verdict):
    print(f"RESULT {name} {verdict}", flush=True)


def errno_of(fn):
    try:
        fn()
        return 0
    except OSError as e:
        return e.errno


class Region:
    """N bytes at a page-unaligned address, kept alive with the buffer."""

    def __init__(self, skew, fill=None):
        self.raw = ctypes.create_string_buffer(N + 2 * PAGE)
        base = ctypes.addressof(self.raw)
        self.addr = (base + PAGE - 1) // PAGE * PAGE + skew
        if fill is not None:
            ctypes.memmove(self.addr, fill, N)

    def bytes(self):
        return ctypes.string_at(self.addr, N)


def get_mr(s, region, flags=0, for_dest=None):
    cookie = ctypes.c_uint64(0)
    args = struct.pack("<QQQQ", region.addr, N, ctypes.addressof(cookie), flags)
    if for_dest is None:
        s.setsockopt(SOL_RDS, RDS_GET_MR, args)
    else:
        s.setsockopt(SOL_RDS, RDS_GET_MR_FOR_DEST, for_dest.ljust(128, b"\0") + args)
    return cookie.value


def free_mr(s, cookie, flags=0):
    s.setsockopt(SOL_RDS, RDS_FREE_MR, struct.pack("<QQ", cookie, flags))


def target(me, port, peer, peer_port):
    s = socket.socket(socket.AF_RDS, socket.SOCK_SEQPACKET, 0)
    s.settimeout(90)
    s.bind((me, port))
    a, b, c = Region(200), Region(1000, pattern(7)), Region(3000)
    # The kernel's errors of memory registration (rds-ib.md §6.1).
    errs = {
        "short-optlen": errno_of(lambda: s.setsockopt(SOL_RDS, RDS_GET_MR, b"\0" * 31)),
        "no-bytes": errno_of(lambda: s.setsockopt(
            SOL_RDS, RDS_GET_MR, struct.pack("<QQQQ", a.addr, 0, 0, 0))),
        "wraps": errno_of(lambda: s.setsockopt(
            SOL_RDS, RDS_GET_MR, struct.pack("<QQQQ", 2**64 - 100, 200, 0, 0))),
        "over-257-pages": errno_of(lambda: s.setsockopt(
            SOL_RDS, RDS_GET_MR, struct.pack("<QQQQ", a.addr, 258 * PAGE, 0, 0))),
        "free-unknown": errno_of(lambda: free_mr(s, 0x12345678)),
        "free-zero": errno_of(lambda: free_mr(s, 0)),
    }
    want = {"short-optlen": errno.EINVAL, "no-bytes": errno.EINVAL, "wraps": errno.EINVAL,
            "over-257-pages": errno.EMSGSIZE, "free-unknown": errno.EINVAL, "free-zero": 0}
    bad = {k: v for k, v in errs.items() if v != want[k]}
    result("mr-errors", "ok" if not bad else f"FAIL {bad}")
    ca = get_mr(s, a)
    cb = get_mr(s, b, for_dest=struct.pack("<HH4s", socket.AF_INET, peer_port,
                                          socket.inet_aton(peer)))
    cc = get_mr(s, c, USE_ONCE)
    offsets = [ck >> 32 for ck in (ca, cb, cc)]
    result("cookie-offsets", "ok" if offsets == [200, 1000, 3000] else f"FAIL {offsets}")
    # The initiator side is not built: refused, loudly.
    iov = ctypes.create_string_buffer(struct.pack("<QQ", a.addr, N))
    args = struct.pack("<QQQQQQQ", ca, 0, N, ctypes.addressof(iov), 1, READWRITE, 9)
    e = errno_of(lambda: s.sendmsg([b"x"], [(SOL_RDS, CMSG_RDMA_ARGS, args)], 0,
                                   (peer, peer_port)))
    result("initiator-refused", "ok" if e == errno.EOPNOTSUPP else f"FAIL errno {e}")
    s.sendmsg([b"cookies %d %d %d" % (ca, cb, cc)], [(SOL_RDS, CMSG_RDMA_DEST,
                                                      struct.pack("<Q", ca))],
              0, (peer, peer_port))
    got = set()
    while len(got) < 3:
        data, _, _, _ = s.recvmsg(256, 256)
        word = data.split()[0].decode() if data else ""
        if word == "write":
            result("write", "ok" if a.bytes() == pattern(3) else "FAIL content differs")
        elif word == "once":
            ok = c.bytes() == pattern(5)
            released = errno_of(lambda: free_mr(s, cc)) == errno.EINVAL
            result("use-once", "ok" if ok and released else
                   f"FAIL content {'ok' if ok else 'differs'}, released {released}")
        elif word == "read":
            result("read", data.split()[1].decode())
        elif word == "read-pending":  # the message that carried the RDMA read
            continue
        elif word == "dest":
            result("dest-cookie", "ok" if int(data.split()[1]) == ca else f"FAIL {data!r}")
            continue
        else:
            result("unexpected", repr(data))
            continue
        got.add(word)
    frees = [errno_of(lambda: free_mr(s, ca)), errno_of(lambda: free_mr(s, ca))]
    result("free", "ok" if frees == [0, errno.EINVAL] else f"FAIL {frees}")
    s.close()


def initiator(me, port, peer, peer_port):
    s = socket.socket(socket.AF_RDS, socket.SOCK_SEQPACKET, 0)
    s.settimeout(90)
    s.bind((me, port))
    data, anc, _, addr = s.recvmsg(256, 256)
    dest = [struct.unpack("<Q", d[:8])[0] for lvl, t, d in anc
            if lvl == SOL_RDS and t == CMSG_RDMA_DEST]
    s.sendto(b"dest %d" % (dest[0] if dest else 0), addr)
    ca, cb, cc = (int(w) for w in data.split()[1:])
    keep = []

    def rdma(cookie, local, flags, token, word):
        iov = ctypes.create_string_buffer(struct.pack("<QQ", ctypes.addressof(local), N))
        keep.append(iov)
        args = struct.pack("<QQQQQQQ", cookie, 0, N, ctypes.addressof(iov), 1,
                           flags | NOTIFY_ME, token)
        s.sendmsg([word], [(SOL_RDS, CMSG_RDMA_ARGS, args)], 0, addr)
        while True:  # the notification: recvmsg returns 0 bytes with RDS_CMSG_RDMA_STATUS
            _, anc, _, _ = s.recvmsg(256, 256)
            for lvl, t, d in anc:
                if lvl == SOL_RDS and t == CMSG_RDMA_STATUS:
                    got_token, status = struct.unpack("<Qi", d[:12])
                    print(f"status token {got_token} {status}", flush=True)
                    return got_token == token and status == 0

    w = ctypes.create_string_buffer(pattern(3), N)
    result("kernel-write-status", "ok" if rdma(ca, w, READWRITE, 1, b"write") else "FAIL")
    o = ctypes.create_string_buffer(pattern(5), N)
    result("kernel-once-status", "ok" if rdma(cc, o, READWRITE, 3, b"once") else "FAIL")
    r = ctypes.create_string_buffer(N)
    status = rdma(cb, r, FENCE, 2, b"read-pending")
    same = ctypes.string_at(ctypes.addressof(r), N) == pattern(7)
    result("kernel-read-status", "ok" if status else "FAIL")
    s.sendto(b"read %s" % (b"ok" if same else b"FAIL-content-differs"), addr)
    s.close()


if __name__ == "__main__":
    role, me, port, peer, peer_port = sys.argv[1:6]
    {"target": target, "initiator": initiator}[role](me, int(port), peer, int(peer_port))
