// bad_input_probe: invalid pointers, bogus lengths and unknown options on RDS sockets.
//
// Run under LD_PRELOAD with a private RDS_PRELOAD_RUNDIR. Every call below is one the kernel
// answers with an errno (mostly EFAULT for pointers it cannot copy); the shim must give the same
// errno and must neither crash (SIGSEGV inside the shim = the process dies here) nor disturb its
// engine: after all of it, messages still flow both ways, and what each bad call left in the
// receive queue is exactly what the kernel would have left (a recvmsg that fails with EFAULT
// leaves the message queued; a failed send queues nothing).
//
// "Bad" pointers: a PROT_NONE page (mapped but inaccessible) and address 16 (below
// vm.mmap_min_addr: never mapped; an munmap()ed page is no good, the shim's own allocations may
// reuse it).
// Prints "ok <name>" / "FAIL <name>: got <what> want <errnos>" / "note ..."; exit 0 only if
// every check passed.

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "preload_check.h"

namespace {

constexpr int kAfRds = 21;
constexpr int kSolRds = 276;
constexpr int kRdsCancelSentTo = 1;
constexpr int kRdsRecverr = 5;
constexpr int kSoRdsTransport = 8;
constexpr int kRdsInfoCounters = 10000;
constexpr unsigned long kSiocRdsGetTos = 0x89E1;

int failures = 0;

const char *en(int e) {
  const char *n = strerrorname_np(e);
  return n ? n : "E?";
}

// Checks that a call returned -1 with one of the allowed errnos.
void expect_err(const char *name, long ret, int err, std::initializer_list<int> allowed) {
  bool ok = ret == -1;
  bool in = false;
  for (int a : allowed) in = in || a == err;
  std::string want;
  for (int a : allowed) want += std::string(want.empty() ? "" : "|") + en(a);
  if (ok && in) {
    printf("ok %s (%s)\n", name, en(err));
  } else {
    failures++;
    if (ret == -1) printf("FAIL %s: got -1 %s want %s\n", name, en(err), want.c_str());
    else printf("FAIL %s: got %ld (success) want -1 %s\n", name, ret, want.c_str());
  }
  fflush(stdout);
}

void expect(bool ok, const char *name, const std::string &why) {
  if (ok) printf("ok %s\n", name);
  else {
    failures++;
    printf("FAIL %s: %s\n", name, why.c_str());
  }
  fflush(stdout);
}

// "try" is printed first so that a crash inside the call is attributed to it.
#define CALL(name, expr, ...)                     \
  do {                                            \
    const char *n_ = (name);                      \
    printf("try %s\n", n_);                       \
    fflush(stdout);                               \
    errno = 0;                                    \
    long r_ = static_cast<long>(expr);            \
    expect_err(n_, r_, errno, {__VA_ARGS__});     \
  } while (0)

int rds_socket() {
  int fd = socket(kAfRds, SOCK_SEQPACKET, 0);
  if (fd < 0) {
    printf("FAIL setup: socket(AF_RDS): %s\n", en(errno));
    exit(1);
  }
  return fd;
}

sockaddr_in loopback(uint16_t port) {
  sockaddr_in s{};
  s.sin_family = AF_INET;
  s.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  s.sin_port = htons(port);
  return s;
}

int bound(sockaddr_in *addr) {
  int fd = rds_socket();
  sockaddr_in a = loopback(0);
  socklen_t l = sizeof *addr;
  if (bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) < 0 ||
      getsockname(fd, reinterpret_cast<sockaddr *>(addr), &l) < 0) {
    printf("FAIL setup: bind/getsockname: %s\n", en(errno));
    exit(1);
  }
  return fd;
}

bool wait_readable(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

// Receives one message (bounded wait); "" with *err on failure.
std::string recv_one(int fd, int *err) {
  if (!wait_readable(fd, 3000)) {
    *err = ETIMEDOUT;
    return "<nothing>";
  }
  char buf[256];
  ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
  if (n < 0) {
    *err = errno;
    return "<error>";
  }
  *err = 0;
  return std::string(buf, n);
}

void send_text(int fd, const sockaddr_in &to, const char *text) {
  if (sendto(fd, text, strlen(text), 0, reinterpret_cast<const sockaddr *>(&to), sizeof to) !=
      static_cast<ssize_t>(strlen(text))) {
    printf("FAIL setup: sendto '%s': %s\n", text, en(errno));
    exit(1);
  }
}

}  // namespace

int main() {
  rds_require_preloaded("bad_input_probe");
  setvbuf(stdout, nullptr, _IOLBF, 0);
  long page = sysconf(_SC_PAGESIZE);
  char *none = static_cast<char *>(mmap(nullptr, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  void *bads[2] = {none, reinterpret_cast<void *>(16)};
  const char *bad_names[2] = {"prot-none", "address-16"};

  sockaddr_in aa, ba;
  int a = bound(&aa), b = bound(&ba);
  int u = rds_socket();  // never bound
  int big = 4 << 20;
  setsockopt(a, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
  char text[100];
  memset(text, 't', sizeof text);
  char name[96];

  for (int k = 0; k < 2; k++) {
    void *bad = bads[k];
    auto nm = [&](const char *what) {
      snprintf(name, sizeof name, "%s/%s", what, bad_names[k]);
      return name;
    };
    socklen_t len16 = 16;
    // --- invalid pointers: EFAULT as in the kernel ------------------------------------------
    CALL(nm("bind-addr"), bind(u, static_cast<sockaddr *>(bad), 16), EFAULT);
    CALL(nm("connect-addr"), connect(u, static_cast<sockaddr *>(bad), 16), EFAULT);
    CALL(nm("sendto-msg_name"), sendto(a, text, 10, 0, static_cast<sockaddr *>(bad), 16), EFAULT);
    CALL(nm("sendto-payload"),
         sendto(a, bad, 100, 0, reinterpret_cast<sockaddr *>(&ba), sizeof ba), EFAULT);
    {
      iovec iov[2] = {{text, 10}, {bad, 50}};
      msghdr mh{};
      mh.msg_name = &ba;
      mh.msg_namelen = sizeof ba;
      mh.msg_iov = iov;
      mh.msg_iovlen = 2;
      CALL(nm("sendmsg-second-iov"), sendmsg(a, &mh, 0), EFAULT);
      mh.msg_iov = static_cast<iovec *>(bad);
      mh.msg_iovlen = 1;
      CALL(nm("sendmsg-iov-array"), sendmsg(a, &mh, 0), EFAULT);
      mh.msg_iov = iov;
      mh.msg_iovlen = 1;
      mh.msg_control = bad;
      mh.msg_controllen = 64;
      CALL(nm("sendmsg-control"), sendmsg(a, &mh, 0), EFAULT);
    }
    CALL(nm("sendmsg-msghdr"), sendmsg(a, static_cast<msghdr *>(bad), 0), EFAULT);
    CALL(nm("recvmsg-msghdr"), recvmsg(b, static_cast<msghdr *>(bad), MSG_DONTWAIT), EFAULT);
    CALL(nm("setsockopt-SO_SNDBUF"), setsockopt(a, SOL_SOCKET, SO_SNDBUF, bad, 4), EFAULT);
    CALL(nm("setsockopt-RDS_RECVERR"), setsockopt(a, kSolRds, kRdsRecverr, bad, 4), EFAULT);
    CALL(nm("setsockopt-RDS_CANCEL_SENT_TO"), setsockopt(a, kSolRds, kRdsCancelSentTo, bad, 16),
         EFAULT);
    {
      int v;
      socklen_t l = sizeof v;
      CALL(nm("getsockopt-SO_SNDBUF-optval"), getsockopt(a, SOL_SOCKET, SO_SNDBUF, bad, &l), EFAULT);
      CALL(nm("getsockopt-SO_SNDBUF-optlen"),
           getsockopt(a, SOL_SOCKET, SO_SNDBUF, &v, static_cast<socklen_t *>(bad)), EFAULT);
      char buf[4096];
      CALL(nm("getsockopt-RDS_INFO-optlen"),
           getsockopt(a, kSolRds, kRdsInfoCounters, buf, static_cast<socklen_t *>(bad)), EFAULT);
      socklen_t big_len = 4096;
      // The kernel pins the user pages and reports EAGAIN when that fails (kernel-rds.md A.8).
      CALL(nm("getsockopt-RDS_INFO-optval"), getsockopt(a, kSolRds, kRdsInfoCounters, bad, &big_len),
           EAGAIN, EFAULT);
    }
    {
      sockaddr_in s;
      CALL(nm("getsockname-addr"), getsockname(a, static_cast<sockaddr *>(bad), &len16), EFAULT);
      CALL(nm("getsockname-len"), getsockname(a, reinterpret_cast<sockaddr *>(&s),
                                              static_cast<socklen_t *>(bad)), EFAULT);
    }
    CALL(nm("poll-fds"), poll(static_cast<pollfd *>(bad), 1, 0), EFAULT);
    {
      timeval zero{0, 0};  // a shim that misses the EFAULT must not block here
      CALL(nm("select-readfds"), select(b + 1, static_cast<fd_set *>(bad), nullptr, nullptr, &zero),
           EFAULT);
    }
    {
      int ep = epoll_create1(EPOLL_CLOEXEC);
      CALL(nm("epoll_ctl-event"), epoll_ctl(ep, EPOLL_CTL_ADD, b, static_cast<epoll_event *>(bad)),
           EFAULT);
      close(ep);
    }
    CALL(nm("ioctl-FIONBIO"), ioctl(a, FIONBIO, bad), EFAULT);
    CALL(nm("ioctl-SIOCRDSGETTOS"), ioctl(a, kSiocRdsGetTos, bad), EFAULT);

    // --- receive into bad memory with a message queued ----------------------------------------
    // Nothing must have arrived from the failed sends above: the next message is "m1".
    send_text(a, ba, "m1");
    if (!wait_readable(b, 3000)) {
      expect(false, nm("m1-arrives"), "no message within 3 s");
      continue;
    }
    {
      iovec iov{bad, 100};
      msghdr mh{};
      mh.msg_iov = &iov;
      mh.msg_iovlen = 1;
      CALL(nm("recvmsg-into-bad-buffer"), recvmsg(b, &mh, MSG_DONTWAIT), EFAULT);
    }
    int err;
    std::string m = recv_one(b, &err);
    expect(m == "m1", nm("failed-sends-queued-nothing-and-efault-recv-kept-m1"),
           "next message is '" + m.substr(0, 40) + "' (" + en(err) + "), kernel: 'm1' (the "
           "failed recvmsg leaves it queued, failed sends queue nothing)");
    send_text(a, ba, "m2");
    if (wait_readable(b, 3000)) CALL(nm("read-into-bad-buffer"), read(b, bad, 100), EFAULT);
    m = recv_one(b, &err);
    expect(m == "m2", nm("efault-read-kept-m2"), "got '" + m.substr(0, 40) + "'");
    send_text(a, ba, "m3");
    if (wait_readable(b, 3000)) {
      char buf[64];
      CALL(nm("recvfrom-bad-src_addr"),
           recvfrom(b, buf, sizeof buf, MSG_DONTWAIT, static_cast<sockaddr *>(bad), &len16), EFAULT);
    }
    // The kernel copies the address out after dequeuing: m3 is gone. Accept either, but say so.
    send_text(a, ba, "m4");
    m = recv_one(b, &err);
    if (m == "m3") {
      printf("note recvfrom-bad-src_addr/%s: m3 was kept (the kernel consumes it)\n", bad_names[k]);
      m = recv_one(b, &err);
    }
    expect(m == "m4", nm("after-recvfrom-efault"), "got '" + m.substr(0, 40) + "'");
  }

  // --- bogus lengths -------------------------------------------------------------------------
  sockaddr_in any = loopback(0);
  CALL("bind-len-0", bind(u, reinterpret_cast<sockaddr *>(&any), 0), EINVAL);
  CALL("bind-len-8", bind(u, reinterpret_cast<sockaddr *>(&any), 8), EINVAL);
  CALL("bind-len-huge", bind(u, reinterpret_cast<sockaddr *>(&any), 0x7fffffff), EINVAL);
  CALL("sendto-namelen-8", sendto(a, text, 10, 0, reinterpret_cast<sockaddr *>(&ba), 8), EINVAL);
  CALL("sendto-namelen-huge",
       sendto(a, text, 10, 0, reinterpret_cast<sockaddr *>(&ba), 0x7fffffff), EINVAL);
  {
    std::vector<char> huge(1048577, 'h');
    CALL("sendto-1MiB+1", sendto(a, huge.data(), huge.size(), 0, reinterpret_cast<sockaddr *>(&ba),
                                 sizeof ba), EMSGSIZE);
    std::vector<iovec> iovs(1025, iovec{text, 1});
    msghdr mh{};
    mh.msg_name = &ba;
    mh.msg_namelen = sizeof ba;
    mh.msg_iov = iovs.data();
    mh.msg_iovlen = iovs.size();
    CALL("sendmsg-iovlen-1025", sendmsg(a, &mh, 0), EMSGSIZE);
    mh.msg_name = nullptr;
    mh.msg_namelen = 0;
    CALL("recvmsg-iovlen-1025", recvmsg(b, &mh, MSG_DONTWAIT), EMSGSIZE);
  }
  {
    // cmsg_len larger than the control buffer, and an unknown SOL_RDS cmsg type.
    alignas(cmsghdr) char ctl[CMSG_SPACE(8)] = {};
    cmsghdr *c = reinterpret_cast<cmsghdr *>(ctl);
    c->cmsg_level = kSolRds;
    c->cmsg_type = 99;
    c->cmsg_len = CMSG_LEN(8);
    iovec iov{text, 10};
    msghdr mh{};
    mh.msg_name = &ba;
    mh.msg_namelen = sizeof ba;
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = ctl;
    mh.msg_controllen = sizeof ctl;
    CALL("sendmsg-unknown-cmsg-type", sendmsg(a, &mh, 0), EINVAL);
    c->cmsg_len = 1000;
    CALL("sendmsg-cmsg_len-overruns", sendmsg(a, &mh, 0), EINVAL);
  }
  {
    int v = 1;
    CALL("setsockopt-RDS_RECVERR-len-2", setsockopt(a, kSolRds, kRdsRecverr, &v, 2), EINVAL);
    CALL("setsockopt-SO_SNDBUF-len-2", setsockopt(a, SOL_SOCKET, SO_SNDBUF, &v, 2), EINVAL);
    sockaddr_in s = ba;
    CALL("setsockopt-CANCEL_SENT_TO-len-8", setsockopt(a, kSolRds, kRdsCancelSentTo, &s, 8), EINVAL);
    socklen_t l = 2;
    CALL("getsockopt-RDS_RECVERR-len-2", getsockopt(a, kSolRds, kRdsRecverr, &v, &l), EINVAL);
    l = 2;
    CALL("getsockopt-SO_RDS_TRANSPORT-len-2", getsockopt(a, kSolRds, kSoRdsTransport, &v, &l), EINVAL);
    char buf[64];
    l = 7;
    errno = 0;
    int r = getsockopt(a, kSolRds, kRdsInfoCounters, buf, &l);
    expect(r == -1 && errno == ENOSPC && l >= 40 && l % 40 == 0, "getsockopt-RDS_INFO-len-7",
           "ret " + std::to_string(r) + " " + en(errno) + " optlen " + std::to_string(l) +
               " (want ENOSPC and the needed length, a multiple of 40)");
    l = static_cast<socklen_t>(-1);
    CALL("getsockopt-RDS_INFO-len-negative", getsockopt(a, kSolRds, kRdsInfoCounters, buf, &l),
         EINVAL);
  }

  // --- unknown options, flags and ioctls ----------------------------------------------------
  {
    int v = 1;
    socklen_t l = sizeof v;
    CALL("setsockopt-SOL_RDS-999", setsockopt(a, kSolRds, 999, &v, sizeof v), ENOPROTOOPT);
    CALL("getsockopt-SOL_RDS-999", getsockopt(a, kSolRds, 999, &v, &l), ENOPROTOOPT);
    l = sizeof v;
    CALL("setsockopt-level-12345", setsockopt(a, 12345, 1, &v, sizeof v), ENOPROTOOPT);
    CALL("getsockopt-level-12345", getsockopt(a, 12345, 1, &v, &l), ENOPROTOOPT);
    char buf[1024];
    l = sizeof buf;
    CALL("getsockopt-RDS_INFO-10002", getsockopt(a, kSolRds, 10002, buf, &l), ENOPROTOOPT);
    l = sizeof buf;
    CALL("getsockopt-RDS_INFO-10018", getsockopt(a, kSolRds, 10018, buf, &l), ENOPROTOOPT);
    CALL("setsockopt-SOL_SOCKET-9999", setsockopt(a, SOL_SOCKET, 9999, &v, sizeof v), ENOPROTOOPT);
    CALL("sendto-MSG_NOSIGNAL", sendto(a, text, 10, MSG_NOSIGNAL, reinterpret_cast<sockaddr *>(&ba),
                                       sizeof ba), EOPNOTSUPP);
    CALL("sendto-MSG_MORE", sendto(a, text, 10, MSG_MORE, reinterpret_cast<sockaddr *>(&ba),
                                   sizeof ba), EOPNOTSUPP);
    CALL("ioctl-unknown", ioctl(a, 0x1234, &v), ENOTTY);
    CALL("ioctl-FIONREAD", ioctl(b, FIONREAD, &v), ENOTTY);
    CALL("shutdown", shutdown(a, SHUT_RDWR), EOPNOTSUPP);
  }

  // --- the engine still works, both ways, and nothing stray arrived -------------------------
  int err;
  send_text(a, ba, "final-a-to-b");
  std::string m = recv_one(b, &err);
  expect(m == "final-a-to-b", "alive-a-to-b", "got '" + m.substr(0, 40) + "' " + en(err));
  send_text(b, aa, "final-b-to-a");
  m = recv_one(a, &err);
  expect(m == "final-b-to-a", "alive-b-to-a", "got '" + m.substr(0, 40) + "' " + en(err));
  char buf[64];
  ssize_t n = recv(b, buf, sizeof buf, MSG_DONTWAIT);
  expect(n == -1 && errno == EAGAIN, "nothing-stray-on-b", "recv returned " + std::to_string(n));
  n = recv(a, buf, sizeof buf, MSG_DONTWAIT);
  expect(n == -1 && errno == EAGAIN, "nothing-stray-on-a", "recv returned " + std::to_string(n));
  expect(close(a) == 0 && close(b) == 0 && close(u) == 0, "close", en(errno));
  printf("summary failures %d\n", failures);
  return failures ? 1 : 0;
}
