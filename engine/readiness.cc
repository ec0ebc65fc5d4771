// engine/readiness.cc — backing fds and readiness tokens.
#include "engine/errors.h"
#include "engine/readiness.h"

#include <stddef.h>

#include <cerrno>
#include <cstring>

#include "absl/base/call_once.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "engine/sync.h"
#include "engine/netns.h"
#include "engine/sys.h"

namespace rds {
namespace {

constexpr char kPrefix[] = "rds-preload/v1/";
constexpr size_t kPrefixLen = sizeof(kPrefix) - 1;

socklen_t NameOf(uint64_t id, sockaddr_un* sun) {
  std::memset(sun, 0, sizeof(*sun));
  sun->sun_family = AF_UNIX;
  std::string name = absl::StrFormat("%s%016x", kPrefix, id);
  std::memcpy(sun->sun_path + 1, name.data(), name.size());  // abstract: leading NUL
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

// Socket ids are a random base per process plus a counter, so that one
// process's ids are consecutive: its ownership locks (a one-byte POSIX lock at
// offset id of the host-wide sockets.lock, registry.h) then merge into one
// range in the kernel's lock list, which every lock operation walks. With
// random ids the list held one entry per socket of the host, and creating a
// socket near 10,000 of them cost 0.3–0.8 ms instead of 16 µs. 38 random bits
// (of the 62 the lock offset keeps) make two processes' ranges collide with
// probability ≈ P² / 2^39 for P processes; a collision is seen as a name
// taken in this namespace (bind) or a lock held by another process
// (socket()), and either draws a new base.
constexpr int kIdCounterBits = 22;
constexpr uint64_t kIdCounterMask = (uint64_t{1} << kIdCounterBits) - 1;

rds::Mutex g_id_mu(absl::kConstInit);
uint64_t g_next_id ABSL_GUARDED_BY(g_id_mu) = 0;  // 0: draw a base at next use

uint64_t NextId(bool fresh_base) {
  rds::MutexLock lock(&g_id_mu);
  if (fresh_base || g_next_id == 0 || (g_next_id & kIdCounterMask) == 0) {
    // From the kernel: a fork child must not draw its siblings' base.
    uint64_t base;
    do {
      base = sys::RandomU64() & ~kIdCounterMask & 0x3fffffffffffffffULL;
    } while (base == 0);
    g_next_id = base + 1;
  }
  return g_next_id++;
}

}  // namespace

rds::Mutex& SocketIdMutex() { return g_id_mu; }

void ResetSocketIdsAfterFork() {
  rds::MutexLock lock(&g_id_mu);
  g_next_id = 0;  // the child draws its own base: the parent goes on with this one
}

void NewSocketIdBase() {
  rds::MutexLock lock(&g_id_mu);
  g_next_id = 0;
}

absl::StatusOr<BackingFd> CreateBackingFd(int flags) {
  int fd = sys::Socket(AF_UNIX, SOCK_DGRAM | (flags & (SOCK_NONBLOCK | SOCK_CLOEXEC)), 0);
  if (fd < 0) return RdsError(errno);  // EMFILE at RLIMIT_NOFILE, as socket() gives
  for (int attempt = 0; attempt < 8; ++attempt) {
    // The name is taken in this namespace: another process has this base.
    uint64_t id = NextId(/*fresh_base=*/attempt > 0);
    sockaddr_un sun;
    socklen_t len = NameOf(id, &sun);
    if (sys::Bind(fd, reinterpret_cast<sockaddr*>(&sun), len) == 0) return BackingFd{fd, id};
    if (errno != EADDRINUSE) break;
  }
  int err = errno;
  sys::Close(fd);
  return absl::InternalError(absl::StrFormat("cannot name the RDS fd: %s", strerror(err)));
}

std::optional<uint64_t> RecognizeBackingFd(int fd) {
  sockaddr_un sun;
  socklen_t len = sizeof(sun);
  if (sys::Getsockname(fd, reinterpret_cast<sockaddr*>(&sun), &len) != 0) return std::nullopt;
  if (sun.sun_family != AF_UNIX) return std::nullopt;
  size_t name_len = len - offsetof(sockaddr_un, sun_path);
  if (name_len != 1 + kPrefixLen + 16 || sun.sun_path[0] != '\0') return std::nullopt;
  if (std::memcmp(sun.sun_path + 1, kPrefix, kPrefixLen) != 0) return std::nullopt;
  uint64_t id = 0;
  if (!absl::SimpleHexAtoi(absl::string_view(sun.sun_path + 1 + kPrefixLen, 16), &id)) {
    return std::nullopt;
  }
  return id;
}

int CreateTokenSender(NetNs& ns) {
  int fd = -1;
  absl::Status s = ns.RunIn([&]() -> absl::Status {
    fd = sys::Socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    return fd >= 0 ? absl::OkStatus() : absl::InternalError("socket(AF_UNIX)");
  });
  return s.ok() ? sys::MakeInternal(fd) : -1;
}

bool PostReadinessToken(int sender_fd, uint64_t id) {
  if (sender_fd < 0) return false;
  sockaddr_un sun;
  socklen_t len = NameOf(id, &sun);
  char token = 1;
  return sys::Sendto(sender_fd, &token, 1, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&sun), len) == 1;
}

bool SendToBackingFd(int sender_fd, uint64_t id, const void* data, size_t n, const int* fds,
                     int nfds) {
  sockaddr_un sun;
  socklen_t len = NameOf(id, &sun);
  iovec iov = {const_cast<void*>(data), n};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxBackingFdPassed)] = {};
  msghdr msg = {};
  msg.msg_name = &sun;
  msg.msg_namelen = len;
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (nfds > 0) {
    if (nfds > kMaxBackingFdPassed) {
      errno = EINVAL;
      return false;
    }
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    std::memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
  }
  return sys::Sendmsg(sender_fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) == static_cast<ssize_t>(n);
}

bool BackingFdInUse(int sender_fd, uint64_t id) {
  sockaddr_un sun;
  socklen_t len = NameOf(id, &sun);
  // A datagram socket connects to a name only while a socket is bound to it,
  // and a bound socket's name goes only when its file does.
  return sys::Connect(sender_fd, reinterpret_cast<sockaddr*>(&sun), len) == 0;
}

int DrainReadinessTokens(int fd) {
  int n = 0;
  char buf[16];
  while (sys::Recv(fd, buf, sizeof(buf), MSG_DONTWAIT) >= 0) ++n;
  return n;
}

}  // namespace rds
