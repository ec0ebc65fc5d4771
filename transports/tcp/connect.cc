// transports/tcp/connect.cc — outgoing connections and socket tuning.
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "absl/random/random.h"
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
  // Unacknowledged data gets no keepalive probes: without a bound, a peer
  // that is gone (its reset lost) holds the path for tcp_retries2.
  unsigned int user_timeout_ms = 30000;
  sys::Setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof(user_timeout_ms));
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

namespace {

// Binds `fd` to `laddr` and a source port p with p % 8 == path, from the
// namespace's ephemeral range, as a 7.0+ kernel does for its path `path`
// (kernel-rds.md §C.7): the node then knows the path from the port.
int BindPathPort(int fd, const RdsAddr& laddr, int path) {
  int lo = 32768, hi = 60999;
  const int range = sys::Open("/proc/sys/net/ipv4/ip_local_port_range", O_RDONLY | O_CLOEXEC, 0);
  if (range >= 0) {
    char text[64] = {};
    if (sys::Read(range, text, sizeof(text) - 1) <= 0 || sscanf(text, "%d %d", &lo, &hi) != 2) {
      lo = 32768, hi = 60999;
    }
    sys::Close(range);
  }
  const int first = (lo + 7) / 8;  // groups of 8 ports, the first aligned
  const int groups = hi / 8 - first;
  if (groups <= 0) {
    errno = EADDRNOTAVAIL;
    return -1;
  }
  thread_local absl::BitGen gen;
  const int start = absl::Uniform(gen, 0, groups);
  for (int i = 0; i < std::min(groups, 256); ++i) {
    const int port = ((first + (start + i) % groups) * 8) + path;
    if (port < lo || port > hi) continue;
    sockaddr_storage local;
    socklen_t len = ToSockaddr(laddr, static_cast<uint16_t>(port), &local);
    if (sys::Bind(fd, reinterpret_cast<sockaddr*>(&local), len) == 0) return 0;
    if (errno != EADDRINUSE) return -1;
  }
  errno = EADDRINUSE;
  return -1;
}

}  // namespace

absl::StatusOr<int> Connect(const RdsAddr& laddr, const RdsAddr& faddr, uint16_t port,
                            int path, uint16_t source_port) {
  sockaddr_storage local, remote;
  socklen_t llen = ToSockaddr(laddr, 0, &local);
  socklen_t rlen = ToSockaddr(faddr, port, &remote);
  int fd = sys::Socket(remote.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrFormat("socket: %s", strerror(errno)));
  Tune(fd);
  int bound = -1;
  if (source_port != 0) {
    sockaddr_storage preferred;
    socklen_t plen = ToSockaddr(laddr, source_port, &preferred);
    bound = sys::Bind(fd, reinterpret_cast<sockaddr*>(&preferred), plen);
  }
  if (bound != 0) {
    bound = path >= 0 ? BindPathPort(fd, laddr, path)
                      : sys::Bind(fd, reinterpret_cast<sockaddr*>(&local), llen);
  }
  if (bound != 0) {
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
