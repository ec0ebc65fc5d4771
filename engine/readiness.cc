// engine/readiness.cc — backing fds and readiness tokens.
#include "engine/errors.h"
#include "engine/readiness.h"

#include <stddef.h>

#include <cerrno>
#include <cstring>

#include "absl/base/call_once.h"
#include "absl/container/flat_hash_map.h"
#include "absl/random/random.h"
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

uint64_t RandomId() {
  thread_local absl::BitGen gen;
  uint64_t id;
  do {
    id = absl::Uniform<uint64_t>(gen);
  } while (id == 0);
  return id;
}

}  // namespace

absl::StatusOr<BackingFd> CreateBackingFd(int flags) {
  int fd = sys::Socket(AF_UNIX, SOCK_DGRAM | (flags & (SOCK_NONBLOCK | SOCK_CLOEXEC)), 0);
  if (fd < 0) return RdsError(errno);  // EMFILE at RLIMIT_NOFILE, as socket() gives
  for (int attempt = 0; attempt < 8; ++attempt) {
    uint64_t id = RandomId();
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

int DrainReadinessTokens(int fd) {
  int n = 0;
  char buf[16];
  while (sys::Recv(fd, buf, sizeof(buf), MSG_DONTWAIT) >= 0) ++n;
  return n;
}

}  // namespace rds
