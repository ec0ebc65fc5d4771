// close_fork_probe: close() while another thread is blocked, and RDS fds across fork().
//
// Run under LD_PRELOAD (private RDS_PRELOAD_RUNDIR). Subcommands:
//
//   close-wakes   A thread blocked in recvmsg() on a socket is woken with EBADF within 2 s when
//                 another thread closes the last fd of the socket (DESIGN.md §7). Variants: plain
//                 blocking recvmsg, two blocked threads, SO_RCVTIMEO set (30 s), and blocking
//                 recvfrom while the closed fd number is immediately reused by a new RDS socket
//                 that receives a message (the blocked thread must not get it: waiters belong
//                 to the socket, not to the fd number).
//   close-dup     With a dup() still open, closing one fd must NOT wake the blocked reader (as in
//                 the kernel): it keeps waiting and receives the next message; closing the last
//                 fd then wakes a reader with EBADF.
//   fork          After fork() parent and child share each socket, as with kernel RDS
//                 (DESIGN.md §2.4): the child sends from the parent's bound socket (its source
//                 port is that socket's), receives on it (blocking and MSG_DONTWAIT), sees its
//                 name, binds the inherited unbound socket (which the parent then sees bound);
//                 poll returns promptly; fcntl(F_GETFD), dup and close work. A new socket created
//                 in the child cannot bind the parent's port (EADDRINUSE) and reaches the parent.
//                 The parent's sockets keep working after the child exited, in both directions.
//
// Prints "ok <what>" / "FAIL <what>: <why>" lines; exit status 0 only if nothing failed.
// Hangs are bounded: a blocked thread that does not wake within its limit is reported and the
// process exits with _exit (it cannot be joined).

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "preload_check.h"

namespace {

constexpr int kAfRds = 21;
int failures = 0;

void report(bool ok, const char *what, const char *fmt = "", ...) __attribute__((format(printf, 3, 4)));
void report(bool ok, const char *what, const char *fmt, ...) {
  char why[512] = "";
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  if (ok) printf("ok %s\n", what);
  else {
    printf("FAIL %s: %s\n", what, why);
    failures++;
  }
  fflush(stdout);
}

const char *en(int e) {
  const char *n = strerrorname_np(e);
  return n ? n : "E?";
}

double now_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

sockaddr_in loop_addr(uint16_t port) {
  sockaddr_in s{};
  s.sin_family = AF_INET;
  s.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  s.sin_port = htons(port);
  return s;
}

int rds_socket() {
  int fd = socket(kAfRds, SOCK_SEQPACKET, 0);
  if (fd < 0) {
    printf("FAIL setup: socket(AF_RDS): %s\n", en(errno));
    exit(1);
  }
  return fd;
}

// A socket bound to 127.0.0.1:<any>; returns its address.
int bound_socket(sockaddr_in *addr) {
  int fd = rds_socket();
  sockaddr_in a = loop_addr(0);
  if (bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) < 0) {
    printf("FAIL setup: bind: %s\n", en(errno));
    exit(1);
  }
  socklen_t l = sizeof *addr;
  if (getsockname(fd, reinterpret_cast<sockaddr *>(addr), &l) < 0) {
    printf("FAIL setup: getsockname: %s\n", en(errno));
    exit(1);
  }
  return fd;
}

bool send_to(int fd, const sockaddr_in &to, const char *text) {
  return sendto(fd, text, strlen(text), 0, reinterpret_cast<const sockaddr *>(&to), sizeof to) ==
         static_cast<ssize_t>(strlen(text));
}

// Receives with a bounded wait (poll first); returns the message or "" with *err set.
std::string recv_bounded(int fd, int timeout_ms, int *err, sockaddr_in *from = nullptr) {
  pollfd p{fd, POLLIN, 0};
  double end = now_ms() + timeout_ms;
  for (;;) {
    char buf[256];
    sockaddr_in f{};
    socklen_t fl = sizeof f;
    ssize_t n = recvfrom(fd, buf, sizeof buf, MSG_DONTWAIT, reinterpret_cast<sockaddr *>(&f), &fl);
    if (n >= 0) {
      if (from) *from = f;
      *err = 0;
      return std::string(buf, n);
    }
    if (errno != EAGAIN) {
      *err = errno;
      return "";
    }
    int left = static_cast<int>(end - now_ms());
    if (left <= 0) {
      *err = ETIMEDOUT;
      return "";
    }
    poll(&p, 1, left);
  }
}

// A thread blocked in recvmsg (or recvfrom) on fd; records the outcome.
struct Blocked {
  std::atomic<bool> returned{false};
  std::atomic<ssize_t> ret{0};
  std::atomic<int> err{0};
  std::atomic<double> at_ms{0};
  std::string data;
  std::thread t;

  void start(int fd, bool use_recvfrom = false) {
    t = std::thread([this, fd, use_recvfrom] {
      char buf[256];
      ssize_t n;
      if (use_recvfrom) {
        sockaddr_in f{};
        socklen_t fl = sizeof f;
        n = recvfrom(fd, buf, sizeof buf, 0, reinterpret_cast<sockaddr *>(&f), &fl);
      } else {
        iovec iov{buf, sizeof buf};
        msghdr mh{};
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        n = recvmsg(fd, &mh, 0);
      }
      err = n < 0 ? errno : 0;
      if (n > 0) data.assign(buf, n);
      ret = n;
      at_ms = now_ms();
      returned = true;
    });
  }
  ~Blocked() {
    if (t.joinable()) t.join();  // only destroyed once returned (see done_with)
  }
  // Waits up to ms for the thread to return.
  bool wait(int ms) {
    double end = now_ms() + ms;
    while (!returned && now_ms() < end) usleep(2000);
    if (returned) t.join();
    return returned;
  }
};

// A blocked thread that never returns cannot be joined: report it, leave it blocked (its
// Blocked object is leaked on purpose) and go on with the next check.
bool hung(const char *what, int ms) {
  report(false, what, "the blocked thread did not return within %d ms (hang)", ms);
  return false;
}

// ---------------------------------------------------------------------------------------------

// Blocked objects live on the heap: one whose thread never returns is leaked, not destroyed.
Blocked &new_blocked() { return *new Blocked; }
void done_with(Blocked &b) {
  if (b.returned) delete &b;
}

void close_wakes() {
  {  // one blocked reader
    sockaddr_in a;
    int fd = bound_socket(&a);
    Blocked &b = new_blocked();
    b.start(fd);
    usleep(300 * 1000);
    if (b.returned) {
      report(false, "close-wakes/plain", "recvmsg returned before close: ret %zd %s", b.ret.load(),
             en(b.err));
      close(fd);
    } else {
      double t0 = now_ms();
      int rc = close(fd);
      if (!b.wait(2000)) {
        hung("close-wakes/plain", 2000);
      } else {
        report(rc == 0 && b.ret == -1 && b.err == EBADF, "close-wakes/plain",
               "close rc %d; recvmsg ret %zd errno %s after %.0f ms (want -1 EBADF)", rc,
               b.ret.load(), en(b.err), b.at_ms - t0);
        printf("info close-wakes/plain woke after %.1f ms\n", b.at_ms - t0);
      }
    }
    done_with(b);
  }
  {  // two blocked readers on the same socket
    sockaddr_in a;
    int fd = bound_socket(&a);
    Blocked &b1 = new_blocked(), &b2 = new_blocked();
    b1.start(fd);
    b2.start(fd);
    usleep(300 * 1000);
    int rc = close(fd);
    bool w1 = b1.wait(2000), w2 = b2.wait(2000);
    if (!w1 || !w2) hung("close-wakes/two-readers", 2000);
    else
      report(rc == 0 && b1.ret == -1 && b1.err == EBADF && b2.ret == -1 && b2.err == EBADF,
             "close-wakes/two-readers", "reader1 %zd %s, reader2 %zd %s", b1.ret.load(),
             en(b1.err), b2.ret.load(), en(b2.err));
    done_with(b1);
    done_with(b2);
  }
  {  // with SO_RCVTIMEO: woken by close long before the timeout, with EBADF (not ETIMEDOUT)
    sockaddr_in a;
    int fd = bound_socket(&a);
    timeval tv{30, 0};
    if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0)
      report(false, "close-wakes/rcvtimeo", "setsockopt SO_RCVTIMEO: %s", en(errno));
    Blocked &b = new_blocked();
    b.start(fd);
    usleep(300 * 1000);
    close(fd);
    if (!b.wait(2000)) hung("close-wakes/rcvtimeo", 2000);
    else
      report(b.ret == -1 && b.err == EBADF, "close-wakes/rcvtimeo",
             "recvmsg ret %zd errno %s (want -1 EBADF)", b.ret.load(), en(b.err));
    done_with(b);
  }
  {  // the fd number is reused at once by a new socket that receives a message
    sockaddr_in a, sender_addr;
    int fd = bound_socket(&a);
    int sender = bound_socket(&sender_addr);
    Blocked &b = new_blocked();
    b.start(fd, /*use_recvfrom=*/true);
    usleep(300 * 1000);
    close(fd);
    int fresh = rds_socket();  // most likely the same number
    sockaddr_in fa = loop_addr(0);
    bind(fresh, reinterpret_cast<sockaddr *>(&fa), sizeof fa);
    socklen_t fl = sizeof fa;
    getsockname(fresh, reinterpret_cast<sockaddr *>(&fa), &fl);
    send_to(sender, fa, "for-the-new-socket");
    if (!b.wait(2000)) hung("close-wakes/fd-reuse", 2000);
    else
      report(b.ret == -1 && b.err == EBADF, "close-wakes/fd-reuse",
             "old reader got ret %zd errno %s data '%s' (fd %d reused as %d)", b.ret.load(),
             en(b.err), b.data.c_str(), fd, fresh);
    int err;
    std::string m = recv_bounded(fresh, 2000, &err);
    // If the old reader stole the message, the new socket has nothing: that is the bug.
    report(m == "for-the-new-socket", "close-wakes/fd-reuse-new-socket-receives",
           "new socket got '%s' (%s)", m.c_str(), en(err));
    done_with(b);
    close(fresh);
    close(sender);
  }
}

void close_dup() {
  sockaddr_in a, s_addr;
  int fd = bound_socket(&a);
  int sender = bound_socket(&s_addr);
  int fd2 = dup(fd);
  if (fd2 < 0) {
    report(false, "close-dup/dup", "dup: %s", en(errno));
    return;
  }
  Blocked &b = new_blocked();
  b.start(fd2);
  usleep(200 * 1000);
  close(fd);  // fd2 still refers to the socket: the reader keeps waiting
  usleep(400 * 1000);
  report(!b.returned, "close-dup/still-blocked-while-dup-open",
         "reader returned %zd %s after closing only one of two fds", b.ret.load(), en(b.err));
  if (!b.returned) {
    send_to(sender, a, "still-alive");
    if (!b.wait(2000)) hung("close-dup/receives-after-partial-close", 2000);
    else
      report(b.ret > 0 && b.data == "still-alive", "close-dup/receives-after-partial-close",
             "reader got ret %zd %s data '%s'", b.ret.load(), en(b.err), b.data.c_str());
  }
  done_with(b);
  Blocked &b2 = new_blocked();
  b2.start(fd2);
  usleep(300 * 1000);
  int rc = close(fd2);
  if (!b2.wait(2000)) hung("close-dup/last-close-wakes", 2000);
  else
    report(rc == 0 && b2.ret == -1 && b2.err == EBADF, "close-dup/last-close-wakes",
           "reader ret %zd errno %s", b2.ret.load(), en(b2.err));
  done_with(b2);
  close(sender);
}

// ---------------------------------------------------------------------------------------------

void expect_errno(const char *what, ssize_t r, int e, int want) {
  report(r == -1 && e == want, what, "ret %zd errno %s (want -1 %s)", r, en(e), en(want));
}

uint16_t port_of(int fd) {
  sockaddr_in got{};
  socklen_t gl = sizeof got;
  if (getsockname(fd, reinterpret_cast<sockaddr *>(&got), &gl) != 0) return 0;
  return ntohs(got.sin_port);
}

// Runs in the forked child: the parent's sockets are the child's too.
void child_checks(int s, int u, sockaddr_in s_addr, sockaddr_in r_addr) {
  alarm(10);  // hang guard: SIGALRM kills the child, the parent reports it
  ssize_t r;
  char buf[64];
  r = recvfrom(s, buf, sizeof buf, MSG_DONTWAIT, nullptr, nullptr);
  expect_errno("fork/child-recvfrom-dontwait-empty", r, errno, EAGAIN);
  report(port_of(s) == ntohs(s_addr.sin_port), "fork/child-getsockname", "port %u (want %u)",
         port_of(s), ntohs(s_addr.sin_port));
  sockaddr_in any = loop_addr(0);
  r = bind(u, reinterpret_cast<sockaddr *>(&any), sizeof any);
  report(r == 0 && port_of(u) != 0, "fork/child-bind-inherited-unbound", "ret %zd errno %s port %u",
         r, en(errno), port_of(u));
  printf("info child bound the shared unbound socket to %u\n", port_of(u));
  r = sendto(s, "hello-from-child", 16, 0, reinterpret_cast<sockaddr *>(&r_addr), sizeof r_addr);
  report(r == 16, "fork/child-sendto-inherited", "ret %zd errno %s", r, en(errno));
  // The parent answers on the inherited socket: a blocking receive gets it.
  int err;
  sockaddr_in from{};
  std::string m = recv_bounded(s, 5000, &err, &from);
  report(m == "to-inherited" && from.sin_port == r_addr.sin_port, "fork/child-recvfrom-inherited",
         "got '%s' from %u (%s)", m.c_str(), ntohs(from.sin_port), en(err));
  pollfd p{s, POLLIN, 0};
  double t0 = now_ms();
  int pr = poll(&p, 1, 300);
  printf("info fork/child-poll returned %d revents 0x%x after %.0f ms\n", pr, p.revents, now_ms() - t0);
  report(pr == 0 && now_ms() - t0 < 1000, "fork/child-poll-empty-bounded", "poll %d took %.0f ms",
         pr, now_ms() - t0);
  int fdflags = fcntl(s, F_GETFD);
  report(fdflags >= 0, "fork/child-fcntl-getfd", "fcntl(F_GETFD): %s", en(errno));
  int d = dup(u);
  report(d >= 0, "fork/child-dup", "dup: %s", en(errno));
  if (d >= 0) report(close(d) == 0, "fork/child-close-dup", "close: %s", en(errno));
  report(close(s) == 0, "fork/child-close-inherited-bound", "close: %s", en(errno));
  report(close(u) == 0, "fork/child-close-inherited-unbound", "close: %s", en(errno));

  // A fresh socket in the child works and talks to the parent.
  int c = rds_socket();
  sockaddr_in taken = s_addr;
  r = bind(c, reinterpret_cast<sockaddr *>(&taken), sizeof taken);
  report(r == -1 && errno == EADDRINUSE, "fork/child-cannot-bind-parents-port",
         "bind to the parent's %u: ret %zd errno %s (want EADDRINUSE)", ntohs(s_addr.sin_port), r,
         en(errno));
  sockaddr_in ca = loop_addr(0);
  r = bind(c, reinterpret_cast<sockaddr *>(&ca), sizeof ca);
  report(r == 0, "fork/child-new-socket-bind", "bind: %s", en(errno));
  report(send_to(c, r_addr, "hello-from-new"), "fork/child-new-socket-send", "sendto: %s", en(errno));
  m = recv_bounded(c, 5000, &err);
  report(m == "ack", "fork/child-gets-parents-ack", "got '%s' (%s)", m.c_str(), en(err));
  close(c);
}

void fork_test() {
  sockaddr_in s_addr, r_addr, u_addr{};
  int s = bound_socket(&s_addr);  // the parent's socket, bound
  int r = bound_socket(&r_addr);  // the parent's receiving socket
  int u = rds_socket();           // unbound
  (void)u_addr;
  // Works before the fork.
  int err;
  send_to(s, r_addr, "before");
  std::string m = recv_bounded(r, 2000, &err);
  report(m == "before", "fork/parent-before", "got '%s' (%s)", m.c_str(), en(err));

  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) {
    report(false, "fork/fork", "%s", en(errno));
    return;
  }
  if (pid == 0) {
    failures = 0;
    child_checks(s, u, s_addr, r_addr);
    printf("info child failures %d\n", failures);
    fflush(stdout);
    _exit(failures ? 1 : 0);
  }
  // Parent: the child's message from the shared socket arrives on r, from that socket's port;
  // the answer goes back to the shared socket, where the child waits for it.
  sockaddr_in from{};
  m = recv_bounded(r, 8000, &err, &from);
  report(m == "hello-from-child" && from.sin_port == s_addr.sin_port,
         "fork/parent-gets-childs-message", "got '%s' from %u (%s)", m.c_str(),
         ntohs(from.sin_port), en(err));
  send_to(r, s_addr, "to-inherited");
  m = recv_bounded(r, 8000, &err, &from);
  report(m == "hello-from-new", "fork/parent-gets-childs-new-socket", "got '%s' (%s)", m.c_str(),
         en(err));
  if (m == "hello-from-new") send_to(r, from, "ack");
  int status = 0;
  double end = now_ms() + 15000;
  pid_t w = 0;
  while ((w = waitpid(pid, &status, WNOHANG)) == 0 && now_ms() < end) usleep(10000);
  if (w == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    report(false, "fork/child-exited", "child did not exit within 15 s (hang)");
  } else if (WIFSIGNALED(status)) {
    report(false, "fork/child-exited", "child killed by signal %d%s", WTERMSIG(status),
           WTERMSIG(status) == SIGALRM ? " (a call hung for 10 s)" : "");
  } else {
    report(WEXITSTATUS(status) == 0, "fork/child-checks", "child reported %d failure(s)",
           WEXITSTATUS(status));
  }
  // The parent's sockets keep working after the child is gone, in both directions.
  bool sent = send_to(s, r_addr, "after");
  m = recv_bounded(r, 3000, &err);
  report(sent && m == "after", "fork/parent-after-s-to-r", "sent %d got '%s' (%s)", sent, m.c_str(),
         en(err));
  sent = send_to(r, s_addr, "back");
  m = recv_bounded(s, 3000, &err);
  report(sent && m == "back", "fork/parent-after-r-to-s", "sent %d got '%s' (%s)", sent, m.c_str(),
         en(err));
  // Still owning its port.
  int t = rds_socket();
  sockaddr_in again = s_addr;
  int br = bind(t, reinterpret_cast<sockaddr *>(&again), sizeof again);
  report(br == -1 && errno == EADDRINUSE, "fork/parent-still-owns-port", "bind ret %d errno %s", br,
         en(errno));
  // The child bound the shared unbound socket: it is bound here too.
  printf("info parent sees the shared unbound socket bound to %u\n", port_of(u));
  report(port_of(u) != 0, "fork/parent-sees-childs-bind", "port %u", port_of(u));
  sockaddr_in ua = loop_addr(0);
  int ub = bind(u, reinterpret_cast<sockaddr *>(&ua), sizeof ua);
  report(ub == -1 && errno == EINVAL, "fork/parent-cannot-bind-again", "bind ret %d errno %s", ub,
         en(errno));
  close(t);
  close(u);
  close(s);
  close(r);
}

}  // namespace

int main(int argc, char **argv) {
  rds_require_preloaded("close_fork_probe");
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc != 2) {
    fprintf(stderr, "usage: close_fork_probe close-wakes|close-dup|fork\n");
    return 2;
  }
  std::string cmd = argv[1];
  if (cmd == "close-wakes") close_wakes();
  else if (cmd == "close-dup") close_dup();
  else if (cmd == "fork") fork_test();
  else {
    fprintf(stderr, "unknown subcommand %s\n", argv[1]);
    return 2;
  }
  printf("summary failures %d\n", failures);
  return failures ? 1 : 0;
}
