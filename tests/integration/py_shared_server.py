"""Runs under LD_PRELOAD (started by test_shared_sockets.py): one RDS socket used by several
Python processes, as kernel RDS shares it (DESIGN.md §2.4; issue 22 point 1).

  py_shared_server.py MODE ADDR PORT WORKERS
      Binds ADDR:PORT, starts WORKERS workers that all answer requests on that one socket with
      "<worker>:<request>" (exiting on "quit"), prints "ready" and exits first. MODE says how the
      workers get the socket:
        mp-fork    multiprocessing.Process, fork start method (the socket is inherited)
        mp-spawn   a multiprocessing Pool, spawn start method (the socket is pickled: its fd goes
                   over SCM_RIGHTS from multiprocessing's resource sharer, in a new interpreter)
        subprocess subprocess.Popen(..., pass_fds=[fd]): a new interpreter after fork and exec
        scm        independent processes that fetch the descriptor over a Unix socket with
                   socket.send_fds / recv_fds
  py_shared_server.py exec ADDR PORT
      Binds ADDR:PORT, prints "bound", waits for "go" on stdin (messages are sent to it meanwhile),
      then execs a new interpreter keeping the descriptor. The new image prints "image", waits for
      a line on stdin before it touches the socket (more messages are sent meanwhile), prints
      "port <PORT>" for the socket's name and every message as "got <text>" until none comes for 2 s,
      then "done".
"""

import multiprocessing
import os
import socket
import subprocess
import sys
import tempfile


def serve(sock, wid):
    while True:
        data, addr = sock.recvfrom(2048)
        if data == b"quit":
            return
        sock.sendto(b"%d:" % wid + data, addr)


def serve_after(go, sock, wid):
    go.wait()
    serve(sock, wid)


def serve_fd(fd, wid):
    serve(socket.socket(fileno=fd), wid)


started = None  # a pool worker's queue for "I hold the socket"


def pool_init(queue):
    global started
    started = queue


def pool_worker(sock, wid):
    started.put(wid)  # the socket arrived with the task
    serve(sock, wid)
    os._exit(0)  # the launcher is gone: no result to return


def main():
    mode = sys.argv[1]
    if mode == "worker-fd":  # subprocess mode, after exec
        serve_fd(int(sys.argv[2]), int(sys.argv[3]))
        return
    if mode == "worker-scm":  # scm mode: fetch the descriptor from the launcher
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as u:
            u.connect(sys.argv[2])
            _, fds, _, _ = socket.recv_fds(u, 16, 1)
        serve_fd(fds[0], int(sys.argv[3]))
        return
    if mode == "exec-image":
        # The socket is parked until this image's first call on it: messages sent meanwhile
        # wait for it.
        print("image", flush=True)
        sys.stdin.readline()
        s = socket.socket(fileno=int(sys.argv[2]))
        print(f"port {s.getsockname()[1]}", flush=True)
        s.settimeout(2.0)
        while True:
            try:
                data, _ = s.recvfrom(2048)
            except (socket.timeout, BlockingIOError):
                break
            print(f"got {data.decode()}", flush=True)
        print("done", flush=True)
        return

    addr, port = sys.argv[2], int(sys.argv[3])
    s = socket.socket(socket.AF_RDS, socket.SOCK_SEQPACKET)
    s.bind((addr, port))
    if mode == "exec":
        print("bound", flush=True)
        sys.stdin.readline()
        os.set_inheritable(s.fileno(), True)
        os.execv(sys.executable, [sys.executable, __file__, "exec-image", str(s.fileno())])
    workers = int(sys.argv[4])
    if mode == "mp-fork":
        # The workers start once every fork is done (see shared_echo.c: a fork while the
        # parent's engine thread works is unsafe under AddressSanitizer only).
        ctx = multiprocessing.get_context("fork")
        go = ctx.Event()
        for w in range(workers):
            ctx.Process(target=serve_after, args=(go, s, w)).start()
        go.set()
    elif mode == "mp-spawn":
        ctx = multiprocessing.get_context("spawn")
        queue = ctx.SimpleQueue()
        pool = ctx.Pool(workers, initializer=pool_init, initargs=(queue,))
        for w in range(workers):
            pool.apply_async(pool_worker, (s, w))
        # The launcher serves each task's copy of the descriptor (multiprocessing's resource
        # sharer): it stays until every worker holds the socket.
        for _ in range(workers):
            queue.get()
    elif mode == "subprocess":
        for w in range(workers):
            subprocess.Popen([sys.executable, __file__, "worker-fd", str(s.fileno()), str(w)],
                             pass_fds=[s.fileno()])
    elif mode == "scm":
        path = os.path.join(tempfile.mkdtemp(), "launcher.sock")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as u:
            u.bind(path)
            u.listen(workers)
            for w in range(workers):
                subprocess.Popen([sys.executable, __file__, "worker-scm", path, str(w)])
            for w in range(workers):
                conn, _ = u.accept()
                with conn:
                    socket.send_fds(conn, [b"s"], [s.fileno()])
    else:
        sys.exit(f"unknown mode {mode}")
    print("ready", flush=True)
    os._exit(0)  # the launcher goes first: the workers keep the socket


if __name__ == "__main__":
    main()
