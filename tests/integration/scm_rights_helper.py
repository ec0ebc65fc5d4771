"""Runs under LD_PRELOAD for test_scm_rights_netns.py: the kernel selftest's fd-passing pattern.

  child FD      (inside namespace k) create an unbound RDS socket, pass it over the AF_UNIX
                socket FD with SCM_RIGHTS, close it, print "sent", exit.
  parent FD0 FD1 ADDR0 ADDR1 N
                (in a third namespace) wait for "go" on stdin, receive the two RDS fds from
                the AF_UNIX sockets FD0/FD1, wrap them with socket.fromfd (which dups; the
                received fd is then closed), bind socket 0 to (ADDR0, 10000) and socket 1 to
                (ADDR1, 20000) -- addresses of the namespaces the sockets were created in, not of
                the parent's -- set them non-blocking, register both in one epoll set for
                EPOLLRDNORM and run the traffic of kernel-rds.md §D with N messages:
                message i = sha256("packet i") hex (64 bytes) from socket i%2 to socket
                1-((i%3)%2) (a third are self-sends), sending until EAGAIN/ENOBUFS, then
                receiving through epoll until everything sent has arrived.
                Pass: for every (sender, receiver) pair the running SHA-256 over
                "<" + repr(payload) + ">" is equal on both sides (exactly once, in order).
                Prints "pair ..." lines, then "PASS" or "FAIL ..." and exits 0/1.
"""

import errno
import hashlib
import os
import select
import socket
import sys
import time

SOL_RDS = 276
PORTS = (10000, 20000)


def require_preloaded():
    lib = os.environ.get("LD_PRELOAD", "")
    if not lib:
        return
    with open("/proc/self/maps") as f:
        maps = f.read()
    for entry in lib.replace(":", " ").split():
        if os.path.realpath(entry) not in maps:
            print(f"fatal preload-not-loaded {entry}", flush=True)
            sys.exit(2)


def child(fd):
    unix = socket.socket(fileno=fd)
    s = socket.socket(socket.AF_RDS, socket.SOCK_SEQPACKET, 0)
    socket.send_fds(unix, [b"rds"], [s.fileno()])
    s.close()
    unix.close()
    print("sent", flush=True)


def fail(msg):
    print(f"FAIL {msg}", flush=True)
    sys.exit(1)


def parent(fd0, fd1, addr0, addr1, n):
    if sys.stdin.readline().strip() != "go":
        fail("no go")
    socks = []
    for k, fd in enumerate((fd0, fd1)):
        unix = socket.socket(fileno=fd)
        unix.settimeout(10)
        msg, fds, flags, _ = socket.recv_fds(unix, 16, 4)
        if len(fds) != 1:
            fail(f"socket {k}: received {len(fds)} fds (msg {msg!r} flags {flags:#x})")
        s = socket.fromfd(fds[0], socket.AF_RDS, socket.SOCK_SEQPACKET)
        os.close(fds[0])
        dom = s.getsockopt(socket.SOL_SOCKET, socket.SO_DOMAIN)
        if dom != socket.AF_RDS:
            fail(f"socket {k}: passed fd has SO_DOMAIN {dom}, not AF_RDS")
        socks.append(s)
        print(f"step received socket {k} (fd {s.fileno()})", flush=True)
    addrs = [(addr0, PORTS[0]), (addr1, PORTS[1])]
    for k, s in enumerate(socks):
        try:
            s.bind(addrs[k])
        except OSError as e:
            fail(f"socket {k}: bind {addrs[k]} (an address of the namespace the socket was created "
                 f"in): {errno.errorcode.get(e.errno, e.errno)}")
        if s.getsockname() != addrs[k]:
            fail(f"socket {k}: getsockname {s.getsockname()} != {addrs[k]}")
        s.setblocking(False)
        print(f"step bound socket {k} to {addrs[k]}", flush=True)
    ep = select.epoll()
    for s in socks:
        ep.register(s.fileno(), select.EPOLLRDNORM)
    print("step epoll registered; traffic starts", flush=True)
    fileno_to_idx = {s.fileno(): k for k, s in enumerate(socks)}
    addr_to_idx = {a: k for k, a in enumerate(addrs)}

    send_hashes, recv_hashes = {}, {}
    counts_tx, counts_rx = {}, {}
    nr_send = nr_recv = 0
    stall_limit = 20.0
    while nr_send < n:
        # Send as much as possible.
        while nr_send < n:
            i = nr_send
            data = hashlib.sha256(f"packet {i}".encode()).hexdigest().encode()
            sender, receiver = i % 2, 1 - ((i % 3) % 2)
            try:
                socks[sender].sendto(data, addrs[receiver])
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno in (errno.ENOBUFS, errno.ECONNRESET, errno.EPIPE):
                    break
                fail(f"sendto #{i} {sender}->{receiver}: {errno.errorcode.get(e.errno, e.errno)}")
            h = send_hashes.setdefault((sender, receiver), hashlib.sha256())
            h.update(b"<" + repr(data).encode() + b">")
            counts_tx[(sender, receiver)] = counts_tx.get((sender, receiver), 0) + 1
            nr_send += 1
        # Receive everything sent so far.
        last_progress = time.monotonic()
        while nr_recv < nr_send:
            events = ep.poll(1.0)
            if not events and time.monotonic() - last_progress > stall_limit:
                fail(f"stalled: received {nr_recv} of {nr_send} sent (no message for "
                     f"{stall_limit:.0f} s)")
            for fileno, mask in events:
                receiver = fileno_to_idx[fileno]
                while True:
                    try:
                        data, src = socks[receiver].recvfrom(1024)
                    except BlockingIOError:
                        break
                    if src not in addr_to_idx:
                        fail(f"socket {receiver} received from unknown address {src}")
                    sender = addr_to_idx[src]
                    h = recv_hashes.setdefault((sender, receiver), hashlib.sha256())
                    h.update(b"<" + repr(data).encode() + b">")
                    counts_rx[(sender, receiver)] = counts_rx.get((sender, receiver), 0) + 1
                    nr_recv += 1
                    last_progress = time.monotonic()
        if nr_recv > nr_send:
            fail(f"received {nr_recv} > sent {nr_send}")

    # Anything more would be a duplicate.
    time.sleep(0.2)
    for k, s in enumerate(socks):
        try:
            data, src = s.recvfrom(1024)
            fail(f"socket {k}: extra message from {src} after all {n} arrived: {data[:20]!r}")
        except BlockingIOError:
            pass

    # Epilogue of the selftest: every RDS_INFO option, errors counted but not fatal.
    ok = bad = 0
    for s in socks:
        for opt in range(10000, 10018):
            try:
                s.getsockopt(SOL_RDS, opt, 1024)
                ok += 1
            except OSError:
                bad += 1
    print(f"getsockopt(): {ok}/{bad}", flush=True)

    failed = False
    for pair in sorted(send_hashes):
        tx = send_hashes[pair].hexdigest()
        rx = recv_hashes[pair].hexdigest() if pair in recv_hashes else None
        print(f"pair {pair[0]}->{pair[1]} sent {counts_tx[pair]} received "
              f"{counts_rx.get(pair, 0)} tx {tx} rx {rx}", flush=True)
        if tx != rx:
            failed = True
    if set(recv_hashes) - set(send_hashes):
        failed = True
        print(f"unexpected pairs received: {set(recv_hashes) - set(send_hashes)}")
    for s in socks:
        s.close()
    if failed:
        fail("per-pair SHA-256 differs (lost, duplicated, reordered or corrupted messages)")
    print("PASS", flush=True)


def main():
    require_preloaded()
    if sys.argv[1] == "child":
        child(int(sys.argv[2]))
    elif sys.argv[1] == "parent":
        parent(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], int(sys.argv[6]))
    else:
        sys.exit(f"unknown mode {sys.argv[1]}")


if __name__ == "__main__":
    main()
