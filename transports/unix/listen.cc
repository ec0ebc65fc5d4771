// transports/unix/listen.cc — the engine's Unix listener.
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"
#include "engine/sys.h"
#include "transports/unix/unix.h"

namespace rds::unix_link {

absl::StatusOr<int> Listen(const std::string& path) {
  sockaddr_un sun = {};
  sun.sun_family = AF_UNIX;
  if (path.size() >= sizeof(sun.sun_path)) {
    return absl::InvalidArgumentError(absl::StrFormat("socket path too long: %s", path));
  }
  std::memcpy(sun.sun_path, path.data(), path.size());
  int fd = sys::Socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrFormat("socket: %s", strerror(errno)));
  unlink(path.c_str());  // a stale socket of a dead process with our pid
  if (sys::Bind(fd, reinterpret_cast<sockaddr*>(&sun), sizeof(sun)) != 0 ||
      sys::Listen(fd, 128) != 0) {
    int err = errno;
    sys::Close(fd);
    return absl::UnavailableError(absl::StrFormat("listen on %s: %s", path, strerror(err)));
  }
  // Anyone may connect: the engine admits peers by SO_PEERCRED uid
  // (RDS_PRELOAD_LINK_UIDS), and refusals are counted and logged there.
  chmod(path.c_str(), 0777);  // best effort: without it only our own user can connect
  return sys::MakeInternal(fd);
}

int Accept(int listen_fd) {
  int fd = sys::Accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) return -1;
  WidenSendBuffer(fd);
  return sys::MakeInternal(fd);
}

absl::StatusOr<uid_t> PeerUid(int fd) {
  struct ucred cred = {};
  socklen_t len = sizeof(cred);
  if (sys::Getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return absl::InternalError(absl::StrFormat("SO_PEERCRED: %s", strerror(errno)));
  }
  return cred.uid;
}

}  // namespace rds::unix_link
