// transports/tcp/listen.cc — the rendezvous listener and accepted sockets.
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"
#include "engine/sys.h"
#include "transports/tcp/tcp.h"

namespace rds::tcp {

absl::StatusOr<int> Listen(uint16_t port) {
  int fd = sys::Socket(AF_INET6, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  bool v6 = fd >= 0;
  if (!v6) fd = sys::Socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrFormat("socket: %s", strerror(errno)));
  int one = 1, zero = 0;
  sys::Setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sys::Setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
  sys::Setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  int r;
  if (v6) {
    sys::Setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    sockaddr_in6 sin6 = {};
    sin6.sin6_family = AF_INET6;
    sin6.sin6_port = htons(port);
    sin6.sin6_addr = in6addr_any;
    r = sys::Bind(fd, reinterpret_cast<sockaddr*>(&sin6), sizeof(sin6));
  } else {
    sockaddr_in sin = {};
    sin.sin_family = AF_INET;
    sin.sin_port = htons(port);
    sin.sin_addr.s_addr = htonl(INADDR_ANY);
    r = sys::Bind(fd, reinterpret_cast<sockaddr*>(&sin), sizeof(sin));
  }
  if (r != 0 || sys::Listen(fd, 64) != 0) {
    int err = errno;
    sys::Close(fd);
    return absl::UnavailableError(absl::StrFormat(
        "cannot listen on TCP port %d: %s (kernel rds_tcp loaded here, or another user's "
        "engine holds it?)",
        port, strerror(err)));
  }
  return sys::MakeInternal(fd);
}

int Accept(int listen_fd, RdsEndpoint* peer, RdsEndpoint* local) {
  sockaddr_storage ss = {};
  socklen_t len = sizeof(ss);
  int fd = sys::Accept4(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len,
                        SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) return -1;
  *peer = FromKernelSockaddr(ss);
  sockaddr_storage ls = {};
  len = sizeof(ls);
  sys::Getsockname(fd, reinterpret_cast<sockaddr*>(&ls), &len);
  *local = FromKernelSockaddr(ls);
  Tune(fd);
  return sys::MakeInternal(fd);
}

}  // namespace rds::tcp
