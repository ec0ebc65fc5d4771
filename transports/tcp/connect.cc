// transports/tcp/connect.cc — outgoing connections and socket tuning.
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_format.h"
#include "conf/settings.h"
#include "engine/log.h"
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
  const std::string& cc = conf::Get().tcp_congestion;
  if (!cc.empty() && sys::Setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc.data(),
                                     static_cast<socklen_t>(cc.size())) != 0) {
    // Unknown (ENOENT) or not in net.ipv4.tcp_allowed_congestion_control
    // for this user (EPERM): the link keeps the host's default.
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true)) {
      log::Warn("RDS_PRELOAD_TCP_CONGESTION=%s: %s; TCP links use the host's default", cc,
                strerror(errno));
    }
  }
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
    if (err == ECONNREFUSED) {  // as a StreamLink reports a refusal seen later
      return absl::NotFoundError(
          absl::StrFormat("connect %s:%d: nothing listens there", faddr.ToString(), port));
    }
    return absl::UnavailableError(
        absl::StrFormat("connect %s:%d: %s", faddr.ToString(), port, strerror(err)));
  }
  return sys::MakeInternal(fd);
}

}  // namespace rds::tcp
