// engine/sys.cc — raw system calls and the internal-fd registry.
#include "engine/sys.h"

#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <ctime>
#include <cstring>

namespace rds::sys {
namespace {

// One bit per fd below kMaxTracked: lock-free membership test for the close()
// wrapper's hot path. The array lives in .bss: pages are touched only where
// internal fds actually are.
constexpr int kMaxTracked = 1 << 20;
std::atomic<uint64_t> internal_bits[kMaxTracked / 64];
// Internal fds a fork child keeps (a library's own state needs them there).
std::atomic<uint64_t> kept_bits[kMaxTracked / 64];

int HighFloor() {
  static const int floor = [] {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
    rlim_t soft = rl.rlim_cur;
    if (soft == RLIM_INFINITY || soft > static_cast<rlim_t>(kMaxTracked)) soft = kMaxTracked;
    if (soft < 64) return 0;
    return static_cast<int>(soft > 512 ? soft - soft / 4 : soft / 2);
  }();
  return floor;
}

void SetBit(int fd, bool on) {
  if (fd < 0 || fd >= kMaxTracked) return;
  uint64_t bit = uint64_t{1} << (fd & 63);
  if (on) {
    internal_bits[fd >> 6].fetch_or(bit, std::memory_order_release);
  } else {
    internal_bits[fd >> 6].fetch_and(~bit, std::memory_order_release);
    kept_bits[fd >> 6].fetch_and(~bit, std::memory_order_release);
  }
}

bool TestBit(const std::atomic<uint64_t>* bits, int fd) {
  if (fd < 0 || fd >= kMaxTracked) return false;
  return (bits[fd >> 6].load(std::memory_order_acquire) >> (fd & 63)) & 1;
}

}  // namespace

ssize_t Read(int fd, void* buf, size_t n) { return syscall(SYS_read, fd, buf, n); }
ssize_t Write(int fd, const void* buf, size_t n) { return syscall(SYS_write, fd, buf, n); }

bool WriteAll(int fd, const void* buf, size_t n) {
  const char* p = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t r = Write(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

ssize_t Readv(int fd, const struct iovec* iov, int n) { return syscall(SYS_readv, fd, iov, n); }
ssize_t Writev(int fd, const struct iovec* iov, int n) { return syscall(SYS_writev, fd, iov, n); }
int Close(int fd) { return static_cast<int>(syscall(SYS_close, fd)); }
int Socket(int domain, int type, int protocol) {
  return static_cast<int>(syscall(SYS_socket, domain, type, protocol));
}
int SocketPair(int domain, int type, int protocol, int sv[2]) {
  return static_cast<int>(syscall(SYS_socketpair, domain, type, protocol, sv));
}
int Bind(int fd, const struct sockaddr* addr, socklen_t len) {
  return static_cast<int>(syscall(SYS_bind, fd, addr, len));
}
int Connect(int fd, const struct sockaddr* addr, socklen_t len) {
  return static_cast<int>(syscall(SYS_connect, fd, addr, len));
}
int Listen(int fd, int backlog) { return static_cast<int>(syscall(SYS_listen, fd, backlog)); }
int Shutdown(int fd, int how) { return static_cast<int>(syscall(SYS_shutdown, fd, how)); }
int Accept4(int fd, struct sockaddr* addr, socklen_t* len, int flags) {
  return static_cast<int>(syscall(SYS_accept4, fd, addr, len, flags));
}
int Getsockname(int fd, struct sockaddr* addr, socklen_t* len) {
  return static_cast<int>(syscall(SYS_getsockname, fd, addr, len));
}
int Getpeername(int fd, struct sockaddr* addr, socklen_t* len) {
  return static_cast<int>(syscall(SYS_getpeername, fd, addr, len));
}
int Setsockopt(int fd, int level, int name, const void* val, socklen_t len) {
  return static_cast<int>(syscall(SYS_setsockopt, fd, level, name, val, len));
}
int Getsockopt(int fd, int level, int name, void* val, socklen_t* len) {
  return static_cast<int>(syscall(SYS_getsockopt, fd, level, name, val, len));
}
ssize_t Sendmsg(int fd, const struct msghdr* msg, int flags) {
  return syscall(SYS_sendmsg, fd, msg, flags);
}
ssize_t SendmsgPassingFd(int fd, const struct iovec* iov, int iovcnt, int pass_fd, int flags) {
  struct msghdr mh = {};
  mh.msg_iov = const_cast<struct iovec*>(iov);
  mh.msg_iovlen = static_cast<size_t>(iovcnt);
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (pass_fd >= 0) {
    mh.msg_control = control;
    mh.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
  }
  return Sendmsg(fd, &mh, flags);
}
ssize_t Recvmsg(int fd, struct msghdr* msg, int flags) {
  return syscall(SYS_recvmsg, fd, msg, flags);
}
ssize_t Sendto(int fd, const void* buf, size_t n, int flags, const struct sockaddr* to,
               socklen_t len) {
  return syscall(SYS_sendto, fd, buf, n, flags, to, len);
}
ssize_t Recv(int fd, void* buf, size_t n, int flags) {
  return syscall(SYS_recvfrom, fd, buf, n, flags, nullptr, nullptr);
}
int Fcntl(int fd, int cmd, long arg) { return static_cast<int>(syscall(SYS_fcntl, fd, cmd, arg)); }
int FcntlLock(int fd, int cmd, struct flock* lock) {
  return static_cast<int>(syscall(SYS_fcntl, fd, cmd, lock));
}
int Ioctl(int fd, unsigned long request, void* arg) {
  return static_cast<int>(syscall(SYS_ioctl, fd, request, arg));
}
int Poll(struct pollfd* fds, nfds_t n, int timeout_ms) {
  return static_cast<int>(syscall(SYS_poll, fds, n, timeout_ms));
}
int Ppoll(struct pollfd* fds, nfds_t n, const struct timespec* timeout, const sigset_t* mask) {
  // The kernel copies in and may update the timeout: hand it a copy.
  struct timespec left;
  if (timeout != nullptr) left = *timeout;
  return static_cast<int>(syscall(SYS_ppoll, fds, n, timeout != nullptr ? &left : nullptr, mask,
                                  size_t{8}));
}
int Open(const char* path, int flags, mode_t mode) {
  return static_cast<int>(syscall(SYS_openat, AT_FDCWD, path, flags, mode));
}
int EpollWait(int epfd, struct epoll_event* events, int max, int timeout_ms) {
  return static_cast<int>(syscall(SYS_epoll_wait, epfd, events, max, timeout_ms));
}
int EpollPwait(int epfd, struct epoll_event* events, int max, int timeout_ms,
               const sigset_t* mask) {
  return static_cast<int>(
      syscall(SYS_epoll_pwait, epfd, events, max, timeout_ms, mask, size_t{8}));
}
int Stat(const char* path, struct stat* st) {
  return static_cast<int>(syscall(SYS_newfstatat, AT_FDCWD, path, st, 0));
}

bool ListDir(const char* path, std::vector<std::string>* names) {
  int fd = Open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
  if (fd < 0) return false;
  struct LinuxDirent64 {
    uint64_t d_ino;
    int64_t d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
  };
  alignas(8) char buf[8192];
  bool ok = true;
  for (;;) {
    long n = syscall(SYS_getdents64, fd, buf, sizeof(buf));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      ok = false;
      break;
    }
    for (long off = 0; off < n;) {
      auto* d = reinterpret_cast<LinuxDirent64*>(buf + off);
      if (std::strcmp(d->d_name, ".") != 0 && std::strcmp(d->d_name, "..") != 0) {
        names->emplace_back(d->d_name);
      }
      off += d->d_reclen;
    }
  }
  Close(fd);
  return ok;
}

int Flock(int fd, int operation) {
  int r;
  do {
    r = static_cast<int>(syscall(SYS_flock, fd, operation));
  } while (r != 0 && errno == EINTR);
  return r;
}
int EpollCtl(int epfd, int op, int fd, struct epoll_event* event) {
  return static_cast<int>(syscall(SYS_epoll_ctl, epfd, op, fd, event));
}
int GetSignalDisposition(int sig, SignalDisposition* out) {
  return static_cast<int>(syscall(SYS_rt_sigaction, sig, nullptr, out, sizeof(out->mask)));
}
int EventFd(unsigned int initval, int flags) {
  return static_cast<int>(syscall(SYS_eventfd2, initval, flags));
}
int Setns(int fd, int nstype) { return static_cast<int>(syscall(SYS_setns, fd, nstype)); }
pid_t GetPid() { return static_cast<pid_t>(syscall(SYS_getpid)); }
int Pipe2(int fds[2], int flags) { return static_cast<int>(syscall(SYS_pipe2, fds, flags)); }
ssize_t Vmsplice(int fd, const struct iovec* iov, unsigned long n, unsigned int flags) {
  return syscall(SYS_vmsplice, fd, iov, n, flags);
}
ssize_t Splice(int fd_in, int fd_out, size_t len, unsigned int flags) {
  return syscall(SYS_splice, fd_in, nullptr, fd_out, nullptr, len, flags);
}
ssize_t SpliceToSocketNoSignal(int pipe_fd, int sock, size_t len, unsigned int flags) {
  constexpr size_t kSigsetBytes = 8;  // the kernel's sigset, as rt_sigprocmask takes it
  sigset_t pipe_only, old;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  syscall(SYS_rt_sigprocmask, SIG_BLOCK, &pipe_only, &old, kSigsetBytes);
  ssize_t n = Splice(pipe_fd, sock, len, flags);
  const int err = errno;
  // Unblocked before: no SIGPIPE can have been pending, so one pending now is ours.
  if (n < 0 && err == EPIPE && !sigismember(&old, SIGPIPE)) {
    const struct timespec zero = {0, 0};
    syscall(SYS_rt_sigtimedwait, &pipe_only, nullptr, &zero, kSigsetBytes);
  }
  syscall(SYS_rt_sigprocmask, SIG_SETMASK, &old, nullptr, kSigsetBytes);
  errno = err;
  return n;
}

uint64_t RandomU64() {
  uint64_t v = 0;
  size_t got = 0;
  while (got < sizeof(v)) {
    long n = syscall(SYS_getrandom, reinterpret_cast<char*>(&v) + got, sizeof(v) - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (errno != EINTR) {
      // No getrandom (before Linux 3.17, or filtered by seccomp): the clock and
      // the pid still differ between a parent and its children.
      struct timespec ts;
      clock_gettime(CLOCK_MONOTONIC, &ts);
      uint64_t x = (static_cast<uint64_t>(ts.tv_nsec) << 20) ^ static_cast<uint64_t>(ts.tv_sec) ^
                   (static_cast<uint64_t>(syscall(SYS_getpid)) << 40);
      x ^= x >> 33;  // splitmix64's finaliser: spread the bits
      x *= 0xff51afd7ed558ccdULL;
      x ^= x >> 33;
      return v ^ x;
    }
  }
  return v;
}

namespace {

// The canary (InternalFdsLost): -1 until the first internal fd is made.
std::atomic<int> canary_fd{-1};
dev_t canary_dev = 0;
ino_t canary_ino = 0;
std::atomic_flag canary_making = ATOMIC_FLAG_INIT;

int MoveHigh(int fd) {
  int floor = HighFloor();
  if (floor > 0 && fd < floor) {
    int high = Fcntl(fd, F_DUPFD_CLOEXEC, floor);
    if (high >= 0) {
      Close(fd);
      return high;
    }
  }
  return fd;
}

void MakeCanary() {
  if (canary_fd.load(std::memory_order_acquire) >= 0 || canary_making.test_and_set()) return;
  int fd = MoveHigh(EventFd(0, EFD_CLOEXEC));
  struct stat st;
  if (fd >= 0 && fstat(fd, &st) == 0) {
    canary_dev = st.st_dev;
    canary_ino = st.st_ino;
    SetBit(fd, true);
    canary_fd.store(fd, std::memory_order_release);
  } else if (fd >= 0) {
    Close(fd);
  }
  canary_making.clear();
}

}  // namespace

bool InternalFdsLost() {
  const int fd = canary_fd.load(std::memory_order_acquire);
  if (fd < 0) return false;
  struct stat st;
  if (fstat(fd, &st) != 0) return true;
  return st.st_ino != canary_ino || st.st_dev != canary_dev;
}

int MakeInternal(int fd) {
  if (fd < 0) return fd;
  MakeCanary();
  int moved = MoveHigh(fd);
  SetBit(moved, true);
  return moved;
}

int CloseInternal(int fd) {
  SetBit(fd, false);
  return Close(fd);
}

void ForgetInternal(int fd) { SetBit(fd, false); }

bool IsInternal(int fd) { return TestBit(internal_bits, fd); }

int MakeInternalKeptInForkChild(int fd) {
  fd = MakeInternal(fd);
  if (fd >= 0 && fd < kMaxTracked) {
    kept_bits[fd >> 6].fetch_or(uint64_t{1} << (fd & 63), std::memory_order_release);
  }
  return fd;
}

bool KeptInForkChild(int fd) { return TestBit(kept_bits, fd); }

void ForEachInternal(absl::FunctionRef<void(int fd)> fn) {
  for (int w = 0; w < kMaxTracked / 64; ++w) {
    uint64_t bits = internal_bits[w].load(std::memory_order_acquire);
    while (bits != 0) {
      int b = __builtin_ctzll(bits);
      bits &= bits - 1;
      fn(w * 64 + b);
    }
  }
}

void ForgetAllInternal() {
  for (int w = 0; w < kMaxTracked / 64; ++w) {
    internal_bits[w].store(kept_bits[w].load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
  canary_fd.store(-1, std::memory_order_release);
}

}  // namespace rds::sys
