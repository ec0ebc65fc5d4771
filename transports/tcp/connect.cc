// transports/tcp/connect.cc — outgoing connections and socket tuning.
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"
#include "engine/sys.h"
#include "transports/tcp/tcp.h"

namespace rds::tcp {

void Tune(int fd) {
  int one = 1, idle = 5, intvl = 5, cnt = 5;
  sys::Setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  sys::Setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  sys::Setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  sys::Setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
  sys::Setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

absl::StatusOr<int> Connect(const RdsAddr& laddr, const RdsAddr& faddr, uint16_t port) {
  sockaddr_storage local, remote;
  socklen_t llen = ToSockaddr(laddr, 0, &local);
  socklen_t rlen = ToSockaddr(faddr, port, &remote);
  int fd = sys::Socket(remote.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrFormat("socket: %s", strerror(errno)));
  Tune(fd);
  if (sys::Bind(fd, reinterpret_cast<sockaddr*>(&local), llen) != 0) {
    int err = errno;
    sys::Close(fd);
    return absl::UnavailableError(
        absl::StrFormat("bind %s: %s", laddr.ToString(), strerror(err)));
  }
  if (sys::Connect(fd, reinterpret_cast<sockaddr*>(&remote), rlen) != 0 && errno != EINPROGRESS) {
    int err = errno;
    sys::Close(fd);
    return absl::UnavailableError(
        absl::StrFormat("connect %s:%d: %s", faddr.ToString(), port, strerror(err)));
  }
  return sys::MakeInternal(fd);
}

}  // namespace rds::tcp
