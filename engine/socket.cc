// engine/socket.cc — socket creation, connect, names, poll, ioctl, close.
#include "engine/socket.h"
#include "engine/abandon.h"

#include <arpa/inet.h>
#include <linux/rds.h>
#include <linux/sockios.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "conf/settings.h"
#include "engine/bind.h"
#include "engine/cong.h"
#include "engine/engine.h"
#include "engine/errors.h"
#include "engine/log.h"
#include "engine/readiness.h"
#include "engine/rdma.h"
#include "engine/registry.h"
#include "engine/share.h"
#include "engine/stats.h"
#include "engine/sys.h"
#include "engine/usercopy.h"
#include "engine/waiter.h"

namespace rds {
namespace {

struct SocketList {
  rds::Mutex mu;
  std::vector<std::weak_ptr<RdsSocket>> sockets ABSL_GUARDED_BY(mu);
};
SocketList* socket_list = new SocketList();

}  // namespace

std::vector<std::shared_ptr<RdsSocket>> LiveSockets(NetNsKey ns) {
  std::vector<std::shared_ptr<RdsSocket>> out;
  for (auto& s : AllLiveSockets()) {
    if (s->ns->key() == ns) out.push_back(std::move(s));
  }
  return out;
}

std::vector<std::shared_ptr<RdsSocket>> AllLiveSockets() {
  std::vector<std::shared_ptr<RdsSocket>> out;
  rds::MutexLock lock(&socket_list->mu);
  auto& v = socket_list->sockets;
  for (size_t i = 0; i < v.size();) {
    std::shared_ptr<RdsSocket> s = v[i].lock();
    bool live = false;
    if (s) {
      rds::MutexLock slock(&s->mu);
      live = !s->released;
    }
    if (!live) {
      v[i] = std::move(v.back());
      v.pop_back();
      continue;
    }
    out.push_back(std::move(s));
    ++i;
  }
  return out;
}

void ResetSocketListAfterFork() {
  Abandon(socket_list);
  socket_list = new SocketList();
}

RdsSocket::RdsSocket(uint64_t id, std::shared_ptr<NetNs> ns, bool nonblocking)
    : id(id), ns(std::move(ns)), nonblocking(nonblocking) {}

void RdsSocket::AdmitLocked(size_t len) {
  snd_bytes += len;
  has_sent = true;
  if (snd_msgs++ == 0) in_flight_pin = shared_from_this();
}

std::shared_ptr<RdsSocket> RdsSocket::ReleaseLocked(size_t bytes, size_t msgs) {
  snd_bytes = snd_bytes >= bytes ? snd_bytes - bytes : 0;
  if (msgs > snd_msgs) {
    log::Error("send buffer accounting: %u messages released, %u admitted", msgs, snd_msgs);
    msgs = snd_msgs;
  }
  snd_msgs -= msgs;
  if (snd_msgs != 0) return nullptr;
  return std::move(in_flight_pin);
}

void RdsSocket::WakeWaitersLocked() {
  for (Waiter* w : waiters) w->Wake();
}

void RdsSocket::NotifyLocked(bool arrival) {
  WakeWaitersLocked();
  if (epoll_watched && Readable() && (arrival || tokens == 0)) {
    if (PostReadinessToken(token_sender, id)) ++tokens;
  }
}

void RdsSocket::AddWaiterLocked(Waiter* w) { waiters.push_back(w); }

void RdsSocket::RemoveWaiterLocked(Waiter* w) {
  auto it = std::find(waiters.begin(), waiters.end(), w);
  if (it != waiters.end()) waiters.erase(it);
}

void RdsSocket::DrainTokensLocked(int fd) {
  if (tokens > 0 && !Readable()) {
    DrainReadinessTokens(fd);
    tokens = 0;
  }
}

namespace {

// The backing fd's buffer sizes follow the same kernel rules (defaults,
// doubling, net.core caps) as an RDS socket's, so they are the truth.
void TakeBufferSizes(RdsSocket& rs, int fd, bool set_defaults = true) {
  const conf::Settings& cfg = conf::Get();
  int want[2] = {static_cast<int>(cfg.wmem_default / 2), static_cast<int>(cfg.rmem_default / 2)};
  int names[2] = {SO_SNDBUF, SO_RCVBUF};
  int have[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    socklen_t len = sizeof(int);
    sys::Getsockopt(fd, SOL_SOCKET, names[i], &have[i], &len);
    if (set_defaults && have[i] != want[i] * 2) {
      sys::Setsockopt(fd, SOL_SOCKET, names[i], &want[i], sizeof(int));
      len = sizeof(int);
      sys::Getsockopt(fd, SOL_SOCKET, names[i], &have[i], &len);
    }
  }
  struct stat st;
  if (fstat(fd, &st) == 0) rs.inode = st.st_ino;
  rds::MutexLock lock(&rs.mu);
  rs.sk_sndbuf = have[0];
  rs.sk_rcvbuf = have[1];
}

void AddToLiveList(const std::shared_ptr<RdsSocket>& rs) {
  rds::MutexLock list_lock(&socket_list->mu);
  socket_list->sockets.push_back(rs);
}

}  // namespace

absl::StatusOr<std::shared_ptr<RdsSocket>> CreateSocket(uint64_t id, std::shared_ptr<NetNs> ns,
                                                        int fd, bool nonblocking) {
  if (absl::Status s = HostRegistry::Get().ClaimSocket(id); !s.ok()) return s;
  auto rs = std::make_shared<RdsSocket>(id, std::move(ns), nonblocking);
  TakeBufferSizes(*rs, fd);
  stats::Inc(stats::kShimSocketsCreated);
  AddToLiveList(rs);
  return rs;
}

void RegisterTakenOver(const std::shared_ptr<RdsSocket>& rs, int fd) {
  // The shared file's sizes are the socket's (SO_SNDBUF/SO_RCVBUF act on it).
  TakeBufferSizes(*rs, fd, /*set_defaults=*/false);
  AddToLiveList(rs);
}

void MarkAllShared() {
  rds::MutexLock lock(&socket_list->mu);
  for (const std::weak_ptr<RdsSocket>& w : socket_list->sockets) {
    if (std::shared_ptr<RdsSocket> s = w.lock()) s->maybe_shared.store(true);
  }
}

absl::Status Connect(RdsSocket& rs, const sockaddr* uaddr, socklen_t len) {
  if (rs.remote.load(std::memory_order_acquire)) {
    absl::Status s = share::Connect(rs, uaddr, len);
    if (!share::Adopted(s)) return s;
  }
  sockaddr_storage ss;
  if (absl::Status s = usercopy::SockaddrFromUser(uaddr, len, &ss); !s.ok()) return s;
  if (len < sizeof(sa_family_t)) return RdsError(EINVAL);
  RdsEndpoint dest;
  switch (ss.ss_family) {
    case AF_INET: {
      if (len < sizeof(sockaddr_in)) return RdsError(EINVAL);
      const auto* sin = reinterpret_cast<const sockaddr_in*>(&ss);
      if (sin->sin_addr.s_addr == htonl(INADDR_ANY)) return RdsError(EDESTADDRREQ);
      if (IsV4AnyBroadcastOrMulticast(sin->sin_addr)) return RdsError(EINVAL);
      dest = {RdsAddr::FromV4(sin->sin_addr), ntohs(sin->sin_port)};
      break;
    }
    case AF_INET6: {
      if (len < sizeof(sockaddr_in6)) return RdsError(EINVAL);
      const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(&ss);
      const in6_addr& a = sin6->sin6_addr;
      if (!IsV6Unicast(a)) {
        if (!IsV6Mapped(a)) return RdsError(EPROTOTYPE);
      }
      if (IsV6Mapped(a)) {
        in_addr v4;
        std::memcpy(&v4.s_addr, &a.s6_addr[12], 4);
        if (IsV4AnyBroadcastOrMulticast(v4)) return RdsError(EPROTOTYPE);
      }
      rds::MutexLock lock(&rs.mu);
      if (IsV6LinkLocal(a)) {
        if (sin6->sin6_scope_id == 0) return RdsError(EINVAL);
        if (rs.bound && rs.bound->addr.scope_id != 0 &&
            rs.bound->addr.scope_id != sin6->sin6_scope_id) {
          return RdsError(EINVAL);
        }
      }
      rs.connected = RdsEndpoint{RdsAddr::FromV6(a, sin6->sin6_scope_id), ntohs(sin6->sin6_port)};
      return absl::OkStatus();
    }
    default:
      return RdsError(EAFNOSUPPORT);
  }
  rds::MutexLock lock(&rs.mu);
  rs.connected = dest;
  return absl::OkStatus();
}

absl::StatusOr<socklen_t> GetName(RdsSocket& rs, bool peer, sockaddr_storage* out) {
  if (rs.remote.load(std::memory_order_acquire)) {
    absl::StatusOr<socklen_t> r = share::GetName(rs, peer, out);
    if (!share::Adopted(r.status())) return r;
  }
  rds::MutexLock lock(&rs.mu);
  std::memset(out, 0, sizeof(*out));
  if (peer) {
    if (!rs.connected) return RdsError(ENOTCONN);
    RdsAddr a = rs.connected->addr;
    if (rs.bound) a.scope_id = rs.bound->addr.scope_id;
    return ToSockaddr(a, rs.connected->port, out);
  }
  if (rs.bound) return ToSockaddr(rs.bound->addr, rs.bound->port, out);
  if (rs.connected && !rs.connected->addr.IsV4Mapped()) {
    out->ss_family = AF_INET6;
    return static_cast<socklen_t>(sizeof(sockaddr_in6));
  }
  out->ss_family = rs.connected ? AF_INET : AF_UNSPEC;
  return static_cast<socklen_t>(sizeof(sockaddr_in));
}

short PollMask(RdsSocket& rs) {
  if (rs.remote.load(std::memory_order_acquire)) {
    absl::StatusOr<short> r = share::PollMask(rs);
    if (r.ok()) return *r;
    if (!share::Adopted(r.status())) return POLLERR;
  }
  uint64_t gen = CongestionTable::Get().generation();
  rds::MutexLock lock(&rs.mu);
  short mask = 0;
  // With RDS_CONG_MONITOR off, any map update since this socket's last poll
  // is reported as POLLIN|POLLWRBAND, once ("historical reasons", rds_poll).
  if (!rs.cong_monitor && rs.cong_gen_seen != gen) {
    rs.cong_gen_seen = gen;
    mask |= POLLIN | POLLRDNORM | POLLWRBAND;
  }
  if (rs.Readable()) mask |= POLLIN | POLLRDNORM;
  if (rs.snd_bytes < static_cast<size_t>(rs.RdsSndbuf())) mask |= POLLOUT | POLLWRNORM;
  if (mask) rs.seen_congestion = false;
  return mask;
}

void PollWatch::Add(RdsSocket& rs) {
  // A remote socket's changes happen in its owner: the poller watches its
  // backing fd instead (preload/poll_calls.cc).
  if (rs.remote.load(std::memory_order_acquire)) return;
  bool seen;
  {
    rds::MutexLock lock(&rs.mu);
    rs.AddWaiterLocked(&waiter_);
    seen = rs.seen_congestion;
  }
  sockets_.push_back(&rs);
  if (seen && !congestion_) {
    CongestionTable::Get().AddWaiter(&waiter_);
    congestion_ = true;
  }
}

PollWatch::~PollWatch() {
  if (congestion_) CongestionTable::Get().RemoveWaiter(&waiter_);
  for (RdsSocket* rs : sockets_) {
    rds::MutexLock lock(&rs->mu);
    rs->RemoveWaiterLocked(&waiter_);
  }
}

absl::StatusOr<int> Ioctl(RdsSocket& rs, int fd, unsigned long request, void* arg) {
  if (rs.remote.load(std::memory_order_acquire) &&
      (request == SIOCRDSSETTOS || request == SIOCRDSGETTOS)) {
    absl::StatusOr<int> r = share::Ioctl(rs, request, arg);
    if (!share::Adopted(r.status())) return r;
  }
  switch (request) {
    case SIOCRDSSETTOS: {
      uint8_t tos;
      if (absl::Status s = usercopy::FromUser(&tos, arg, 1); !s.ok()) return s;
      rds::MutexLock lock(&rs.mu);
      // Only the TCP transport has a TOS map (every TOS maps to 0); unbound
      // and loopback sockets fall through to the generic layer: ENOTTY.
      if (rs.transport != kTransTcp) return RdsError(ENOTTY);
      if (rs.tos != 0 || rs.has_sent) return RdsError(EINVAL);
      rs.tos = 0;
      return 0;
    }
    case SIOCRDSGETTOS: {
      uint8_t tos;
      {
        rds::MutexLock lock(&rs.mu);
        tos = rs.tos;
      }
      if (absl::Status s = usercopy::ToUser(arg, &tos, 1); !s.ok()) return s;
      return 0;
    }
    case FIONBIO: {
      int on;
      if (absl::Status s = usercopy::FromUser(&on, arg, sizeof(on)); !s.ok()) return s;
      if (sys::Ioctl(fd, FIONBIO, &on) != 0) return RdsError(errno);
      rds::MutexLock lock(&rs.mu);
      rs.nonblocking = on != 0;
      return 0;
    }
    // Queue-size ioctls exist for the backing fd's family but not for RDS.
    case SIOCINQ:
    case SIOCOUTQ:
    case SIOCOUTQNSD:
    case SIOCATMARK:
      return RdsError(ENOTTY);
    default:
      if (request >= SIOCPROTOPRIVATE && request <= SIOCPROTOPRIVATE + 15) return RdsError(ENOTTY);
      // Generic file and device ioctls behave as for any socket.
      int r = sys::Ioctl(fd, request, arg);
      if (r < 0) return RdsError(errno);
      return r;
  }
}

void Release(RdsSocket& rs) {
  if (rs.remote.load(std::memory_order_acquire)) {
    share::Detach(rs);
    return;
  }
  // Another process may still hold the socket: it lives on there.
  if (share::Park(rs)) return;
  bool has_sent;
  {
    rds::MutexLock lock(&rs.mu);
    if (rs.released) return;
    has_sent = rs.has_sent;
    rs.released = true;
    for (const MessagePtr& m : rs.recv_queue) {
      stats::Add(stats::kRecvBytesFreedFromSock, m->payload.size());
    }
    rs.recv_queue.clear();
    rs.rcv_bytes = 0;
    rs.cong_notify = 0;
    rs.cong_mask = 0;
    if (rs.token_sender >= 0) {
      sys::CloseInternal(rs.token_sender);
      rs.token_sender = -1;
    }
    if (rs.shared_fd >= 0) {
      sys::CloseInternal(rs.shared_fd);
      rs.shared_fd = -1;
    }
    rs.WakeWaitersLocked();
  }
  UpdateReceiveCongestion(rs);  // a released socket's bit is cleared (§A.10 step 3)
  // Unbinding after marking the socket released: a concurrent delivery that
  // still finds it drops the message as for a dead socket. Queued sends go
  // on unless their destination is unreachable (Engine::ReleaseSender).
  Unbind(rs);
  rdma::DropKeys(rs);
  if (has_sent) Engine::Get().ReleaseSender(rs.shared_from_this());
  HostRegistry::Get().ReleaseSocket(rs.id);
}

bool WatchWithEpoll(RdsSocket& rs, int fd) {
  if (rs.remote.load(std::memory_order_acquire)) {
    // The owner keeps readiness on the backing fd for the processes it
    // serves: being served is all this needs.
    absl::StatusOr<short> r = share::PollMask(rs);
    if (!share::Adopted(r.status())) return true;
  }
  return StartReadinessTokens(rs);
}

bool StartReadinessTokens(RdsSocket& rs) {
  int sender = -1;
  {
    rds::MutexLock lock(&rs.mu);
    if (rs.epoll_watched || rs.released) return true;
  }
  sender = CreateTokenSender(*rs.ns);  // outside the lock: may enter a namespace
  if (sender < 0) return false;
  rds::MutexLock lock(&rs.mu);
  if (rs.epoll_watched || rs.released) {
    sys::CloseInternal(sender);
    return true;
  }
  rs.epoll_watched = true;
  rs.token_sender = sender;
  if (rs.Readable() && rs.tokens == 0 && PostReadinessToken(sender, rs.id)) ++rs.tokens;
  return true;
}

}  // namespace rds
