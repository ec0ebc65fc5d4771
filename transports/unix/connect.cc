// transports/unix/connect.cc — connecting to another engine; handing over fds.
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/sys.h"
#include "engine/wire.h"
#include "transports/unix/unix.h"

namespace rds::unix_link {
namespace {

bool FillAddress(const std::string& path, sockaddr_un* sun) {
  std::memset(sun, 0, sizeof(*sun));
  sun->sun_family = AF_UNIX;
  if (path.size() >= sizeof(sun->sun_path)) return false;
  std::memcpy(sun->sun_path, path.data(), path.size());
  return true;
}

}  // namespace

void WidenSendBuffer(int fd) {
  constexpr int kLinkSndbuf = 4 << 20;
  if (sys::Setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &kLinkSndbuf, sizeof(kLinkSndbuf)) != 0) {
    sys::Setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &kLinkSndbuf, sizeof(kLinkSndbuf));
  }
}

absl::StatusOr<int> Connect(const std::string& path) {
  sockaddr_un sun;
  if (!FillAddress(path, &sun)) return absl::InvalidArgumentError("socket path too long");
  int fd = sys::Socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrFormat("socket: %s", strerror(errno)));
  WidenSendBuffer(fd);
  if (sys::Connect(fd, reinterpret_cast<sockaddr*>(&sun), sizeof(sun)) != 0 &&
      errno != EINPROGRESS && errno != EAGAIN) {
    int err = errno;
    sys::Close(fd);
    if (err == ENOENT || err == ECONNREFUSED) {
      return absl::NotFoundError(absl::StrFormat("no engine at %s", path));
    }
    return absl::UnavailableError(absl::StrFormat("connect %s: %s", path, strerror(err)));
  }
  return sys::MakeInternal(fd);
}

absl::Status HandOff(const std::string& path, const MessagePtr& m, int fd_to_pass) {
  sockaddr_un sun;
  if (!FillAddress(path, &sun)) return absl::InvalidArgumentError("socket path too long");
  int fd = sys::Socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError("socket");
  struct timeval tv = {1, 0};
  sys::Setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (sys::Connect(fd, reinterpret_cast<sockaddr*>(&sun), sizeof(sun)) != 0) {
    sys::Close(fd);
    return absl::NotFoundError(absl::StrFormat("no engine at %s", path));
  }
  std::vector<uint8_t> bytes = wire::EncodeRecord(m->header, m->payload.data(), m->payload.size());
  struct iovec iov = {bytes.data(), bytes.size()};
  ssize_t sent = sys::SendmsgPassingFd(fd, &iov, 1, fd_to_pass, MSG_NOSIGNAL);
  size_t done = sent > 0 ? static_cast<size_t>(sent) : 0;
  while (sent >= 0 && done < bytes.size()) {
    sent = sys::Sendto(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL, nullptr, 0);
    if (sent > 0) done += static_cast<size_t>(sent);
  }
  sys::Close(fd);
  if (done < bytes.size()) return absl::UnavailableError("handoff write failed");
  return absl::OkStatus();
}

}  // namespace rds::unix_link
