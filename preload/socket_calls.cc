// preload/socket_calls.cc — interposed socket-API entry points: socket,
// socketpair, bind, connect, listen, accept, shutdown, names and options.
#include <linux/rds.h>
#include <sys/socket.h>

#include "engine/errors.h"
#include "engine/bind.h"
#include "engine/engine.h"
#include "engine/log.h"
#include "engine/readiness.h"
#include "engine/socket.h"
#include "engine/sockopt.h"
#include "engine/sys.h"
#include "engine/usercopy.h"
#include "preload/errno_policy.h"
#include "preload/fd_table.h"
#include "preload/lifecycle.h"
#include "preload/real.h"
#include "preload/sdp_calls.h"
#include "preload/sdp_fds.h"
#include "sdp/socket_forms.h"

using rds::RdsSocket;
using rds::preload::Fail;
using rds::preload::Lookup;
using rds::preload::Run;
namespace sdp_fds = rds::preload::sdp_fds;
namespace sdp_calls = rds::preload::sdp_calls;

namespace {

constexpr int kTypeFlags = SOCK_NONBLOCK | SOCK_CLOEXEC;

// What socket(2) checks before the RDS family's create: flag bits (EINVAL),
// then rds_create: SOCK_SEQPACKET with protocol 0 only.
int CheckRdsType(int type, int protocol) {
  constexpr int kSockMax = SOCK_PACKET + 1;
  if (type & ~(0xf | kTypeFlags)) return EINVAL;
  if ((type & 0xf) >= kSockMax) return EINVAL;
  if ((type & ~kTypeFlags) != SOCK_SEQPACKET || protocol != 0) return ESOCKTNOSUPPORT;
  return 0;
}

int CreateRdsSocket(int type, int protocol) {
  if (int err = CheckRdsType(type, protocol)) return Fail<int>(err);
  int saved = errno;
  rds::preload::OnFirstRdsSocket();
  // A raw close_range(2) may have taken the engine's fds since the last call.
  if (rds::Engine::IfRunning() != nullptr && rds::sys::InternalFdsLost()) {
    rds::preload::RecoverFromLostFds();
  }
  absl::StatusOr<rds::BackingFd> backing;
  absl::StatusOr<std::shared_ptr<RdsSocket>> rs;
  for (int attempt = 0;; ++attempt) {
    backing = rds::CreateBackingFd(type & kTypeFlags);
    if (!backing.ok()) {
      rds::log::Error("socket(AF_RDS): %s", backing.status().ToString());
      // Out of fds: the kernel's socket() says so (EMFILE/ENFILE); anything else is memory.
      const int err = rds::ErrnoOf(backing.status());
      return Fail<int>(err == EMFILE || err == ENFILE ? err : ENOMEM);
    }
    absl::StatusOr<std::shared_ptr<rds::NetNs>> ns = rds::NetNs::OfCurrentThread();
    rs = ns.ok() ? rds::CreateSocket(backing->id, *ns, backing->fd, type & SOCK_NONBLOCK)
                 : absl::StatusOr<std::shared_ptr<RdsSocket>>(ns.status());
    // The id is owned by a process of another network namespace that drew
    // the same id base (readiness.cc): take ids from a new base.
    if (rs.ok() || !absl::IsFailedPrecondition(rs.status()) || attempt == 3) break;
    rds::real::close(backing->fd);
    rds::NewSocketIdBase();
  }
  if (!rs.ok()) {
    rds::log::Error("socket(AF_RDS): %s", rs.status().ToString());
    rds::real::close(backing->fd);
    return Fail<int>(ENOMEM);
  }
  rds::preload::Publish(backing->fd, std::move(*rs));
  rds::log::Trace("socket(AF_RDS) = %d", backing->fd);
  errno = saved;
  return backing->fd;
}

}  // namespace

extern "C" {

int socket(int domain, int type, int protocol) {
  if (domain == AF_RDS) return CreateRdsSocket(type, protocol);
  const rds::sdp::SocketForm sdp = rds::sdp::ClassifySocketCall(domain, type, protocol);
  if (sdp.sdp) return rds::preload::sdp_calls::Socket(sdp);
  const int fd = rds::real::socket(domain, type, protocol);
  // A number an SDP socket had, closed where close() was not called (fclose): not SDP now.
  if (fd >= 0 && !rds::preload::InVforkChild()) sdp_fds::Forget(fd);
  return fd;
}

int socketpair(int domain, int type, int protocol,
                                                      int sv[2]) {
  if (domain != AF_RDS) {
    int r = rds::real::socketpair(domain, type, protocol, sv);
    if (r == 0) {
      rds::preload::Unpublish(sv[0]);
      rds::preload::Unpublish(sv[1]);
    }
    return r;
  }
  if (int err = CheckRdsType(type, protocol)) return Fail<int>(err);
  return Fail<int>(EOPNOTSUPP);
}

int bind(int fd, const sockaddr* addr, socklen_t len) {
  auto e = Lookup(fd);
  if (!e) {
    if (auto s = sdp_fds::Find(fd)) return sdp_calls::Bind(*s, fd, addr, len);
    return rds::real::bind(fd, addr, len);
  }
  return Run<int>(__func__, *e, [&](RdsSocket& rs) { return rds::Bind(rs, addr, len); });
}

int connect(int fd, const sockaddr* addr, socklen_t len) {
  auto e = Lookup(fd);
  if (!e) {
    auto s = sdp_fds::Find(fd);
    if (!s) s = sdp_calls::ConvertByRules(fd, addr, len);
    if (s) return sdp_calls::Connect(*s, fd, addr, len);
    return rds::real::connect(fd, addr, len);
  }
  return Run<int>(__func__, *e, [&](RdsSocket& rs) { return rds::Connect(rs, addr, len); });
}

int listen(int fd, int backlog) {
  auto e = Lookup(fd);
  if (!e) {
    auto s = sdp_fds::Find(fd);
    if (!s) s = sdp_calls::ConvertByRules(fd, nullptr, 0);
    if (s) return sdp_calls::Listen(*s, fd, backlog);
    return rds::real::listen(fd, backlog);
  }
  return Run<int>(__func__, *e, [](RdsSocket&) { return rds::RdsError(EOPNOTSUPP); });
}

int accept(int fd, sockaddr* addr, socklen_t* len) {
  auto e = Lookup(fd);
  if (!e) {
    if (auto s = sdp_fds::Find(fd)) return sdp_calls::Accept(*s, fd, addr, len, 0, false);
    const int r = rds::real::accept(fd, addr, len);
    if (r >= 0 && !rds::preload::InVforkChild()) sdp_fds::Forget(r);
    return r;
  }
  return Run<int>(__func__, *e, [](RdsSocket&) { return rds::RdsError(EOPNOTSUPP); });
}

int accept4(int fd, sockaddr* addr, socklen_t* len,
                                                   int flags) {
  auto e = Lookup(fd);
  if (!e) {
    if (auto s = sdp_fds::Find(fd)) return sdp_calls::Accept(*s, fd, addr, len, flags, true);
    const int r = rds::real::accept4(fd, addr, len, flags);
    if (r >= 0 && !rds::preload::InVforkChild()) sdp_fds::Forget(r);
    return r;
  }
  if (flags & ~kTypeFlags) return Fail<int>(EINVAL);
  return Run<int>(__func__, *e, [](RdsSocket&) { return rds::RdsError(EOPNOTSUPP); });
}

int shutdown(int fd, int how) {
  auto e = Lookup(fd);
  if (!e) return rds::real::shutdown(fd, how);
  return Run<int>(__func__, *e, [](RdsSocket&) { return rds::RdsError(EOPNOTSUPP); });
}

static int GetName(const char* call, int fd, sockaddr* addr, socklen_t* len, bool peer) {
  auto e = Lookup(fd);
  if (!e) {
    if (auto s = sdp_fds::Find(fd)) return sdp_calls::GetName(*s, fd, addr, len, peer);
    return peer ? rds::real::getpeername(fd, addr, len) : rds::real::getsockname(fd, addr, len);
  }
  return Run<int>(call, *e, [&](RdsSocket& rs) -> absl::Status {
    sockaddr_storage ss;
    absl::StatusOr<socklen_t> klen = rds::GetName(rs, peer, &ss);
    if (!klen.ok()) return klen.status();
    return rds::usercopy::SockaddrToUser(ss, *klen, addr, len);
  });
}

int getsockname(int fd, sockaddr* addr, socklen_t* len) {
  return GetName(__func__, fd, addr, len, false);
}

int getpeername(int fd, sockaddr* addr, socklen_t* len) {
  return GetName(__func__, fd, addr, len, true);
}

int setsockopt(int fd, int level, int name,
                                                      const void* val, socklen_t len) {
  auto e = Lookup(fd);
  if (!e) {
    if (auto s = sdp_fds::Find(fd)) return sdp_calls::SetSockOpt(*s, fd, level, name, val, len);
    return rds::real::setsockopt(fd, level, name, val, len);
  }
  return Run<int>(__func__, *e, [&](RdsSocket& rs) { return rds::SetSockOpt(rs, fd, level, name, val, len); });
}

int getsockopt(int fd, int level, int name, void* val,
                                                      socklen_t* len) {
  auto e = Lookup(fd);
  if (!e) {
    if (auto s = sdp_fds::Find(fd)) return sdp_calls::GetSockOpt(*s, fd, level, name, val, len);
    return rds::real::getsockopt(fd, level, name, val, len);
  }
  return Run<int>(__func__, *e, [&](RdsSocket& rs) { return rds::GetSockOpt(rs, fd, level, name, val, len); });
}

}  // extern "C"
