#!/usr/bin/env python3
"""Writes the committed seed corpus of the fuzz targets (tests/fuzz/corpus/<target>/).

    python3 tests/fuzz/make_corpus.py           # (re)write the seeds
    python3 tests/fuzz/make_corpus.py --check   # fail if a committed seed differs from this script

Deterministic (no randomness, no timestamps): the same script always writes the same bytes. The
input formats are described at the top of each fuzz_<target>.cc. Files other than the ones
written here (e.g. a crash reproducer added to a corpus directory) are left alone.

Wire layouts (kernel-rds.md §C.2, §C.4; engine/control.cc for the shim's hello and control
bodies) are spelled out here independently of the C++ code.
"""

import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")

MAX_MSG = 1 << 20
CONG_MAP_BYTES = 8192

# Extension types.
EXT_VERSION, EXT_RDMA, EXT_RDMA_DEST, EXT_RDMA_BYTES = 1, 2, 3, 4
EXT_NPATHS, EXT_GEN_NUM, EXT_SPORT_IDX = 5, 6, 8
EXT_SHIM_HELLO, EXT_SHIM_CONTROL, EXT_SHIM_PAYLOAD_REF = 0x20, 0x21, 0x22


def header(seq=0, ack=0, length=0, sport=0, dport=0, flags=0, credit=0, csum=0, ext=b""):
    """struct rds_header: 48 bytes, big-endian, padding zero, ext zero-filled to 16 bytes."""
    assert len(ext) <= 16
    return struct.pack(">QQIHHBB4sH16s", seq, ack, length, sport, dport, flags, credit,
                       b"\0" * 4, csum, ext.ljust(16, b"\0"))


def ext_npaths(n):
    return bytes([EXT_NPATHS]) + struct.pack(">H", n)


def ext_gen(g):
    return bytes([EXT_GEN_NUM]) + struct.pack(">I", g)


def probe_ext(npaths=1, gen=7, hello=False):
    e = ext_npaths(npaths) + ext_gen(gen)
    if hello:
        e += bytes([EXT_SHIM_HELLO])
    return e


# Shim hello body (engine/control.cc): magic, version, kind, result, pid, gen, uid, ns dev, ns ino,
# from (16 bytes + be32 scope), to (same), target_pid, query_port, answer_pid (92 bytes), then
# the optional trailing fields: be64 ack (resume point), be32 info_option.
MAGIC = b"RDSPRELD"
HELLO_VERSION = 1
KIND_LINK, KIND_QUERY, KIND_REPLY, KIND_HANDOFF, KIND_INFO, KIND_RESET = 1, 2, 3, 4, 5, 6
RES_ACCEPT, RES_COLLISION, RES_NO_ENGINE, RES_REFUSED, RES_ANSWER = 0, 1, 2, 3, 4


def v4(a, b, c, d, scope=0):
    return bytes(10) + b"\xff\xff" + bytes([a, b, c, d]) + struct.pack(">I", scope)


def v6_link_local(last, scope):
    return b"\xfe\x80" + bytes(13) + bytes([last]) + struct.pack(">I", scope)


def hello_body(kind, result=RES_ACCEPT, pid=4242, gen=7, uid=1000, dev=4, ino=4026531840,
               frm=None, to=None, target=0, qport=0, answer=0, magic=MAGIC, version=HELLO_VERSION,
               ack=0, info_option=0, optional=2):
    """optional: how many of the optional trailing fields (ack, info_option) to include."""
    frm = frm if frm is not None else v4(10, 0, 0, 1)
    to = to if to is not None else v4(10, 0, 0, 2)
    body = (magic + struct.pack(">HHHIIIQQ", version, kind, result, pid, gen, uid, dev, ino) +
            frm + to + struct.pack(">IHI", target, qport, answer))
    if optional >= 1:
        body += struct.pack(">Q", ack)
    if optional >= 2:
        body += struct.pack(">I", info_option)
    return body


def hello_msg(kind, gen=7, **kw):
    body = hello_body(kind, gen=gen, **kw)
    reply = kind == KIND_REPLY
    h = header(length=len(body), sport=0 if reply else 1, dport=1 if reply else 0,
               ext=probe_ext(1, gen, hello=True))
    return h + body


def control_msg(op, query_id=1, port=4000, owner=4242, seq=2, data=b""):
    body = struct.pack(">IHI", query_id, port, owner) + data
    return header(seq=seq, length=len(body), sport=1, dport=1,
                  ext=bytes([EXT_SHIM_CONTROL, op])) + body


def data_msg(payload, seq=1, sport=4000, dport=5000, **kw):
    return header(seq=seq, length=len(payload), sport=sport, dport=dport, **kw) + payload


def cong_map(seq=0):
    bitmap = bytearray(CONG_MAP_BYTES)
    bitmap[4000 // 8] |= 1 << (4000 % 8)
    return header(seq=seq, length=CONG_MAP_BYTES, flags=0x01) + bytes(bitmap)


# ----------------------------------------------------------------------------------------------
# fuzz_wire: [48-byte header][ExtWriter program: op%4 = 0 Npaths(2) 1 GenNum(4) 2 Hello 3 Ctl(1)]

def wire_seeds():
    ping = header(seq=1, sport=1, dport=0, ext=probe_ext(8, 0xdeadbeef))
    k7_probe = probe_ext(8, 0x01020304) + bytes([EXT_SPORT_IDX, 0])
    rdma_dest = bytes([EXT_RDMA_DEST]) + struct.pack(">II", 0x11223344, 0x55667788)
    version_rdma = (bytes([EXT_VERSION]) + struct.pack(">I", 0x0301) +
                    bytes([EXT_RDMA]) + struct.pack(">I", 9))
    full_area = (ext_gen(1) + ext_gen(2) + ext_npaths(3) +
                 bytes([EXT_SHIM_CONTROL, 1, EXT_SHIM_HELLO]))
    with_padding = header(length=1)[:26] + b"\xaa\xbb\xcc\xdd" + header(length=1)[30:]
    return {
        "data-header": header(seq=1, ack=0, length=5, sport=4000, dport=5000),
        "kernel-probe-npaths-only": header(seq=1, sport=1, dport=0, ext=ext_npaths(8)),
        "kernel7-probe-gen-sportidx": header(seq=1, sport=1, dport=0, ext=k7_probe),
        "handshake-pong": header(seq=1, sport=0, dport=1, ext=ext_npaths(1)),
        "ping": header(seq=3, sport=4000, dport=0),
        "pong": header(seq=4, sport=0, dport=4000),
        "cong-map-header": header(length=CONG_MAP_BYTES, flags=0x01),
        "shim-hello-header": header(length=104, sport=1, dport=0, ext=probe_ext(1, 9, hello=True)),
        "shim-control-header": header(length=10, sport=1, dport=1,
                                      ext=bytes([EXT_SHIM_CONTROL, 3])),
        "rdma-dest-ext": header(length=1, sport=1, dport=2, ext=rdma_dest),
        "version-rdma-ext": header(ext=version_rdma),
        "unknown-type-below-16": header(ext=bytes([9, 7, EXT_NPATHS, 0, 2])),
        "unknown-type-above-16": header(ext=bytes([0x30]) + ext_npaths(2)),
        "record-past-area": header(ext=b"\x07" * 11 + bytes([EXT_RDMA_DEST, 1, 2, 3, 4])),
        "area-exactly-full": header(ext=full_area),
        # Same-host links: a payload by reference (after a GEN_NUM record), and one alone.
        "shim-payload-ref": header(length=300000, sport=4000, dport=5000,
                                   ext=ext_gen(7) + bytes([EXT_SHIM_PAYLOAD_REF]) +
                                   struct.pack(">Q", 0x40000)),
        "shim-payload-ref-only": header(seq=5, length=65536,
                                        ext=bytes([EXT_SHIM_PAYLOAD_REF]) + struct.pack(">Q", 0)),
        # A zero-length record (unknown type < 16, or the shim hello) in the area's last byte.
        "zero-length-record-last-byte": header(ext=b"\x07" * 15 + bytes([EXT_SHIM_HELLO])),
        "len-exactly-1mib": header(length=MAX_MSG),
        "len-1mib-plus-1": header(length=MAX_MSG + 1),
        "all-ff": b"\xff" * 48,
        "padding-set": with_padding,
        "truncated-20": header(seq=1, length=5)[:20],
        "empty": b"",
        # Writer programs: a probe (npaths, gen, hello), a control; one that overflows; one whose
        # last record is a zero-length hello in the area's last byte.
        "writer-probe": ping + bytes([0, 0, 1, 1, 0xde, 0xad, 0xbe, 0xef, 2]),
        "writer-control": header(sport=1, dport=1) + bytes([3, 4]),
        "writer-overflow": header() + bytes([1, 0, 0, 0, 1] * 4 + [2, 3, 9, 0, 0, 8]),
        "writer-hello-in-last-byte": header() + bytes([1, 0, 0, 0, 1] * 3 + [2]),
        "writer-on-garbage-ext": b"\x07" * 48 + bytes([2]),
    }


# ----------------------------------------------------------------------------------------------
# fuzz_reassembler: [n][n schedule bytes][stream]; schedule byte s: s>>6 = 0 feed (s&63)+1,
# 1 feed 64*((s&63)+1), 2 direct read, 3 reset + feed.

def sched(*steps):
    return bytes([len(steps)]) + bytes(steps)


def reassembler_seeds():
    three = data_msg(b"hello", seq=1) + data_msg(b"", seq=2) + data_msg(b"x" * 3000, seq=3)
    handshake = (header(seq=1, sport=1, dport=0, ext=probe_ext(1, 5, hello=True)) +
                 header(seq=1, sport=0, dport=1, ext=ext_npaths(1)))
    hello = hello_msg(KIND_LINK, target=99)
    return {
        "one-call-three-msgs": sched() + three,
        "byte-at-a-time": sched(0x00) + three,
        "odd-chunks": sched(0x04, 0x10, 0x2e, 0x01, 0x41) + three,
        "direct-reads": (sched(0x2f, 0x80, 0xbf, 0x83) + data_msg(b"z" * 3500, seq=9) +
                         data_msg(b"q")),
        "reset-mid-message": sched(0x09, 0xc0, 0x3f) + data_msg(b"abcdefgh" * 4) + three,
        "probe-pong-hello": sched(0x05, 0x3f) + handshake + hello + control_msg(2),
        "cong-map": sched(0x7f, 0x3f) + cong_map() + data_msg(b"after map"),
        "zero-length-only": sched(0x2f) + b"".join(header(seq=i, sport=4000, dport=1)
                                                    for i in range(1, 6)),
        "truncated-header": sched() + data_msg(b"ok") + header(seq=2, length=4)[:30],
        "truncated-payload": sched(0x10) + data_msg(b"ok") + data_msg(b"y" * 100)[:90],
        "oversized-after-valid": (sched(0x07) + data_msg(b"first") + header(length=MAX_MSG + 1) +
                                  b"junk"),
        "oversized-first": sched() + header(length=0xffffffff) + data_msg(b"never"),
        "exactly-1mib-short": sched(0x3f, 0x80) + header(length=MAX_MSG) + b"p" * 200,
        "garbage": sched(0x03) + bytes(range(256)),
    }


# ----------------------------------------------------------------------------------------------
# fuzz_control: [48-byte header][payload]

def control_seeds():
    full = hello_msg(KIND_LINK, target=1234, ack=77)
    return {
        "hello-link": full,
        "hello-link-no-optional-fields": hello_msg(KIND_LINK, target=1234, optional=0),
        "hello-link-ack-only": hello_msg(KIND_LINK, target=1234, ack=1 << 40, optional=1),
        "hello-cut-inside-ack": hello_msg(KIND_LINK, target=1234, optional=1)[:-5],
        "hello-info": hello_msg(KIND_INFO, info_option=10005),
        "hello-reset": hello_msg(KIND_RESET, frm=v4(10, 0, 0, 9), to=v4(10, 0, 0, 8)),
        "hello-query": hello_msg(KIND_QUERY, qport=4000),
        "hello-reply-accept": hello_msg(KIND_REPLY, result=RES_ACCEPT),
        "hello-reply-answer": hello_msg(KIND_REPLY, result=RES_ANSWER, answer=777),
        "hello-reply-collision": hello_msg(KIND_REPLY, result=RES_COLLISION),
        "hello-handoff-v6": hello_msg(KIND_HANDOFF, frm=v6_link_local(1, 2),
                                      to=v6_link_local(2, 2)),
        "hello-trailing-bytes": full + b"extra",
        "hello-truncated": full[:-1],
        "hello-bad-magic": hello_msg(KIND_LINK, magic=b"RDSPRELX"),
        "hello-bad-version": hello_msg(KIND_LINK, version=2),
        "hello-bad-kind": hello_msg(0x7fff),
        "hello-bad-result": hello_msg(KIND_REPLY, result=5),
        "hello-payload-kernel-probe": (header(seq=1, sport=1, dport=0, ext=ext_npaths(8)) +
                                       full[48:]),
        "hello-reply-in-ping-shape": (header(length=104, sport=1, dport=0,
                                             ext=probe_ext(1, 7, hello=True)) +
                                      hello_body(KIND_REPLY)),
        "control-route-query": control_msg(1),
        "control-route-reply": control_msg(2, owner=0),
        "control-port-unreachable": control_msg(3),
        "control-ack": control_msg(4),
        "control-info-data": control_msg(5, query_id=8, data=bytes(range(24))),
        "control-bad-op": control_msg(0x7f),
        "control-truncated": control_msg(1)[:-1],
        "control-without-ext": header(sport=1, dport=1, length=10) + bytes(10),
        "data-message": data_msg(b"hello"),
        "short": b"\x00\x01",
    }


# ----------------------------------------------------------------------------------------------
# fuzz_ib_fragments: fragments as RDMA receives deliver them, each [be16 n][n bytes]; each
# fragment is a full header (RFC 1071 checksum at offset 30, rds-ib.md §2.4) and at most 4 KiB.

def ib_csum(h):
    s = sum(struct.unpack(">24H", h[:30] + b"\0\0" + h[32:]))
    while s > 0xFFFF:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def ib_header(**kw):
    h = header(**kw)
    return h[:30] + struct.pack(">H", ib_csum(h)) + h[32:]


def ib_cut(payload, seq=1, sport=4000, dport=5000, ack=0, flags=0):
    h = ib_header(seq=seq, ack=ack, length=len(payload), sport=sport, dport=dport, flags=flags)
    return [h + payload[k:k + 4096] for k in range(0, max(len(payload), 1), 4096)]


def ib_frames(frags):
    return b"".join(struct.pack(">H", len(f)) + f for f in frags)


def ib_fragments_seeds():
    body = bytes((i * 7 + i // 251) & 0xFF for i in range(10000))
    ack = ib_header(ack=42)
    three = ib_cut(body, seq=7, ack=3, flags=0x02)
    wrong = ib_cut(body, seq=8)
    short = three[1][:-1]
    bad_csum = three[0][:3] + bytes([three[0][3] ^ 1]) + three[0][4:]
    return {
        "message-10000-with-acks-between": ib_frames([three[0], ack, three[1], ack, three[2]]),
        "ping-and-ack": ib_frames(ib_cut(b"", sport=4000, dport=0) + [ack]),
        "cong-map": ib_frames(ib_cut(bytes(CONG_MAP_BYTES), seq=0, sport=0, dport=0, flags=0x01)),
        "no-checksum": ib_frames([header(seq=1, length=5, sport=1, dport=2) + b"hello"]),
        "other-message-inside": ib_frames([three[0], wrong[1]] + ib_cut(b"after")),
        "short-middle-fragment": ib_frames([three[0], short] + ib_cut(b"after")),
        "bad-checksum": ib_frames([bad_csum] + ib_cut(b"after")),
        "too-long": ib_frames([ib_header(seq=1, length=MAX_MSG + 1, sport=1, dport=2)]),
        "runt": ib_frames([ack[:20]]) + ack[:47],
    }


# fuzz_sdp_wire: [selector][bytes]; selector 0 a Hello, 1 a HelloAck, 2 an in-band message,
# 3 the credit rule (sdp.md §1.2-1.4; big-endian).

def bsdh(mid, flags=0, bufs=0, length=16, mseq=0, mseq_ack=0):
    return struct.pack(">BBHIII", mid, flags, bufs, length, mseq, mseq_ack)


def sdp_hello(version=0x22, ip=4, max_adverts=1, local_rcv=32784, port=5001, src=b"", dst=b"",
              size=92):
    src = src or bytes(12) + bytes([10, 77, 0, 1])
    dst = dst or bytes(12) + bytes([10, 77, 0, 2])
    h = (bsdh(0x00, bufs=64, length=92) + bytes([version, ip << 4, 0, max_adverts]) +
         struct.pack(">IIHH", 0, local_rcv, port, 0) + src + dst + bytes(24))
    return h[:size]


def sdp_hello_ack(version=0x22, ip=4, max_adverts=1, actual_rcv=32784, size=196):
    h = bsdh(0x01, bufs=64, length=196) + bytes([version, ip << 4, 0, max_adverts])
    return (h + struct.pack(">I", actual_rcv) + bytes(196 - 24))[:size]


def sdp_wire_seeds():
    six = bytes(range(0xfd, 0xed, -1))
    return {
        "hello-v4": b"\0" + sdp_hello(),
        "hello-v4-truncated-56": b"\0" + sdp_hello(size=56),
        "hello-v6": b"\0" + sdp_hello(ip=6, src=six, dst=six[::-1]),
        "hello-32": b"\0" + sdp_hello(size=32),
        "hello-31": b"\0" + sdp_hello(size=31),
        "hello-gen1": b"\0" + sdp_hello(version=0x11),
        "hello-no-adverts": b"\0" + sdp_hello(max_adverts=0),
        "hello-tiny-buffers": b"\0" + sdp_hello(local_rcv=16),
        "hello-ack": b"\1" + sdp_hello_ack(),
        "hello-ack-gen1-no-ip": b"\1" + sdp_hello_ack(ip=0),
        "hello-ack-24": b"\1" + sdp_hello_ack(size=24),
        "hello-ack-ip5": b"\1" + sdp_hello_ack(ip=5),
        "data": b"\2" + bsdh(0xFF, bufs=10, length=21, mseq=1) + b"hello",
        "data-urgent": b"\2" + bsdh(0xFF, flags=3, length=17, mseq=2, mseq_ack=1) + b"!",
        "data-short-length": b"\2" + bsdh(0xFF, length=20, mseq=1) + b"hello",
        "disconnect": b"\2" + bsdh(0x02, mseq=3),
        "abort": b"\2" + bsdh(0x03, mseq=3),
        "hello-in-band": b"\2" + bsdh(0x00, mseq=3),
        "unknown-mid": b"\2" + bsdh(0x42, mseq=3),
        "runt": b"\2" + bsdh(0xFF)[:9],
        "credits": b"\3" + struct.pack(">III", 64, 9, 11),
        "credits-wrapped": b"\3" + struct.pack(">III", 4, 0xFFFFFFFF, 1),
        "credits-overdrawn": b"\3" + struct.pack(">III", 1, 0, 9),
    }


TARGETS = {"wire": wire_seeds, "reassembler": reassembler_seeds, "control": control_seeds,
           "ib_fragments": ib_fragments_seeds, "sdp_wire": sdp_wire_seeds}


def main():
    check = "--check" in sys.argv[1:]
    bad = []
    for target, make in TARGETS.items():
        d = os.path.join(CORPUS, target)
        if not check:
            os.makedirs(d, exist_ok=True)
        for name, data in sorted(make().items()):
            path = os.path.join(d, name)
            if check:
                try:
                    with open(path, "rb") as f:
                        if f.read() != data:
                            bad.append(f"{path}: differs from make_corpus.py")
                except OSError:
                    bad.append(f"{path}: missing")
            else:
                with open(path, "wb") as f:
                    f.write(data)
    if bad:
        print("seed corpus out of date (run python3 tests/fuzz/make_corpus.py):\n  " +
              "\n  ".join(bad), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
