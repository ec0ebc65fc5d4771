// transports/unix/connect.cc — connecting to another engine; one-off requests
// (transports/host_channel.h).
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/sys.h"
#include "engine/wire.h"
#include "transports/host_channel.h"
#include "transports/stream/reassembler.h"
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

}  // namespace rds::unix_link

namespace rds::host_channel {
namespace {

// A blocking connection to the engine at `path`, sends bounded by `limit`.
absl::StatusOr<int> ConnectBlocking(const std::string& path, absl::Duration limit) {
  sockaddr_un sun;
  if (!unix_link::FillAddress(path, &sun)) {
    return absl::InvalidArgumentError("socket path too long");
  }
  int fd = sys::Socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrFormat("socket: %s", strerror(errno)));
  struct timeval tv = absl::ToTimeval(limit);
  sys::Setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sys::Setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (sys::Connect(fd, reinterpret_cast<sockaddr*>(&sun), sizeof(sun)) != 0) {
    sys::Close(fd);
    return absl::NotFoundError(absl::StrFormat("no engine at %s", path));
  }
  return fd;
}

// Writes `m` framed, with `fd_to_pass` on its first byte unless -1.
bool WriteMessage(int fd, const MessagePtr& m, int fd_to_pass) {
  std::vector<uint8_t> bytes = wire::EncodeRecord(m->header, m->payload.data(), m->payload.size());
  struct iovec iov = {bytes.data(), bytes.size()};
  ssize_t sent = sys::SendmsgPassingFd(fd, &iov, 1, fd_to_pass, MSG_NOSIGNAL);
  size_t done = sent > 0 ? static_cast<size_t>(sent) : 0;
  while (sent >= 0 && done < bytes.size()) {
    sent = sys::Sendto(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL, nullptr, 0);
    if (sent > 0) done += static_cast<size_t>(sent);
  }
  return done == bytes.size();
}

}  // namespace

absl::Status Send(const std::string& path, const MessagePtr& m, int fd_to_pass) {
  absl::StatusOr<int> fd = ConnectBlocking(path, absl::Seconds(1));
  if (!fd.ok()) return fd.status();
  const bool written = WriteMessage(*fd, m, fd_to_pass);
  sys::Close(*fd);
  if (!written) return absl::UnavailableError("handoff write failed");
  return absl::OkStatus();
}

absl::Status Ask(const std::string& path, const MessagePtr& request,
                 const std::function<bool(wire::Header&&, Payload&&)>& sink,
                 absl::Duration limit) {
  absl::StatusOr<int> fd = ConnectBlocking(path, limit);
  if (!fd.ok()) return fd.status();
  absl::Status result;
  if (!WriteMessage(*fd, request, -1)) {
    result = absl::UnavailableError("it closed the connection");
  } else {
    Reassembler reader;
    bool done = false;
    auto each = [&](wire::Header&& h, Payload&& p) {
      if (!done) done = sink(std::move(h), std::move(p));
    };
    std::vector<uint8_t> buf(64 * 1024);
    while (!done) {
      ssize_t n = sys::Read(*fd, buf.data(), buf.size());
      if (n == 0) {
        result = absl::UnavailableError("it closed the connection");
      } else if (n < 0) {
        result = (errno == EAGAIN || errno == EWOULDBLOCK)
                     ? absl::DeadlineExceededError(
                           absl::StrFormat("no answer within %s", absl::FormatDuration(limit)))
                     : absl::UnavailableError(strerror(errno));
      } else if (!reader.Feed({buf.data(), static_cast<size_t>(n)}, each).ok()) {
        result = absl::DataLossError("invalid framing");
      }
      if (!result.ok()) break;
    }
  }
  sys::Close(*fd);
  return result;
}

absl::Status Probe(const std::string& path) {
  absl::StatusOr<int> fd = unix_link::Connect(path);
  if (!fd.ok()) return fd.status();
  sys::CloseInternal(*fd);
  return absl::OkStatus();
}

}  // namespace rds::host_channel
