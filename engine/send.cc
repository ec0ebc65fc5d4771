// engine/send.cc — the send path: validation, admission, hand-off.
#include "engine/send.h"

#include <arpa/inet.h>
#include <linux/rds.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/time/clock.h"
#include "engine/engine.h"
#include "engine/errors.h"
#include "engine/log.h"
#include "engine/socket.h"
#include "engine/stats.h"
#include "engine/usercopy.h"
#include "engine/waiter.h"
#include "engine/wire.h"

namespace rds {
namespace {

// The kernel-internal MSG_CMSG_COMPAT bit (not in user headers) is accepted too.
constexpr int kMsgCmsgCompat = static_cast<int>(0x80000000u);
constexpr int kAllowedFlags = MSG_DONTWAIT | kMsgCmsgCompat | MSG_ZEROCOPY;

// The destination named in msg_name (rds_sendmsg's checks). Sets *named.
absl::Status ParseDestination(const msghdr& msg, RdsEndpoint* dest, sa_family_t* family) {
  sockaddr_storage ss;
  if (absl::Status s = usercopy::SockaddrFromUser(static_cast<const sockaddr*>(msg.msg_name),
                                                  msg.msg_namelen, &ss);
      !s.ok()) {
    return s;
  }
  if (msg.msg_namelen < sizeof(sockaddr_in)) return RdsError(EINVAL);
  *family = ss.ss_family;
  if (ss.ss_family == AF_INET) {
    const auto* sin = reinterpret_cast<const sockaddr_in*>(&ss);
    if (IsV4AnyBroadcastOrMulticast(sin->sin_addr)) return RdsError(EINVAL);
    *dest = {RdsAddr::FromV4(sin->sin_addr), ntohs(sin->sin_port)};
    return absl::OkStatus();
  }
  if (ss.ss_family == AF_INET6) {
    if (msg.msg_namelen < sizeof(sockaddr_in6)) return RdsError(EINVAL);
    const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(&ss);
    const in6_addr& a = sin6->sin6_addr;
    if (IsV6Mapped(a)) {
      in_addr v4;
      std::memcpy(&v4.s_addr, &a.s6_addr[12], 4);
      if (IsV4AnyBroadcastOrMulticast(v4)) return RdsError(EINVAL);
    } else if (!IsV6Unicast(a)) {
      return RdsError(EINVAL);
    }
    if (IsV6LinkLocal(a) && sin6->sin6_scope_id == 0) return RdsError(EINVAL);
    *dest = {RdsAddr::FromV6(a, sin6->sin6_scope_id), ntohs(sin6->sin6_port)};
    return absl::OkStatus();
  }
  return RdsError(EINVAL);
}

// rds_rm_size / rds_cmsg_send for a transport without RDMA: every SOL_RDS
// control message is checked; RDMA and atomics are not available on TCP.
absl::Status CheckControl(const msghdr& msg, int flags) {
  bool zcopy_cookie = false;
  bool rdma = false;
  int groups = 0;
  if (msg.msg_controllen > 0) {
    if (msg.msg_controllen > (1 << 20)) return RdsError(ENOBUFS);
    std::vector<uint8_t> control(msg.msg_controllen);
    if (absl::Status s = usercopy::FromUser(control.data(), msg.msg_control, control.size());
        !s.ok()) {
      return s;
    }
    msghdr local = msg;
    local.msg_control = control.data();
    for (cmsghdr* c = CMSG_FIRSTHDR(&local); c != nullptr; c = CMSG_NXTHDR(&local, c)) {
      if (c->cmsg_len < sizeof(cmsghdr) ||
          c->cmsg_len > local.msg_controllen - (reinterpret_cast<uint8_t*>(c) - control.data())) {
        return RdsError(EINVAL);
      }
      if (c->cmsg_level != SOL_RDS) continue;
      switch (c->cmsg_type) {
        case RDS_CMSG_ZCOPY_COOKIE:
          zcopy_cookie = true;
          groups |= 1;
          break;
        case RDS_CMSG_RDMA_DEST:
        case RDS_CMSG_RDMA_MAP:
          rdma = true;
          groups |= 1;
          break;
        case RDS_CMSG_RDMA_ARGS:
        case RDS_CMSG_ATOMIC_CSWP:
        case RDS_CMSG_ATOMIC_FADD:
        case RDS_CMSG_MASKED_ATOMIC_CSWP:
        case RDS_CMSG_MASKED_ATOMIC_FADD:
          rdma = true;
          groups |= 2;
          break;
        default:
          return RdsError(EINVAL);
      }
    }
  }
  if ((flags & MSG_ZEROCOPY) && !zcopy_cookie) return RdsError(EINVAL);
  if (groups == 3) return RdsError(EINVAL);
  if (rdma) return RdsError(EOPNOTSUPP);  // no RDMA over TCP (no xmit_rdma / get_mr)
  if (flags & MSG_ZEROCOPY) {
    log::Warn("MSG_ZEROCOPY is not supported by rds-preload; the send fails with EOPNOTSUPP");
    return RdsError(EOPNOTSUPP);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<size_t> SendMsg(RdsSocket& rs, const msghdr& msg, int flags) {
  if (flags & ~kAllowedFlags) return RdsError(EOPNOTSUPP);

  RdsEndpoint dest;
  sa_family_t family = AF_UNSPEC;
  const bool named = msg.msg_namelen != 0;
  if (named) {
    if (absl::Status s = ParseDestination(msg, &dest, &family); !s.ok()) return s;
  }

  // The iovec array is application memory.
  if (msg.msg_iovlen > IOV_MAX) return RdsError(EMSGSIZE);
  std::vector<iovec> iov(msg.msg_iovlen);
  if (!iov.empty()) {
    if (absl::Status s = usercopy::FromUser(iov.data(), msg.msg_iov, iov.size() * sizeof(iovec));
        !s.ok()) {
      return s;
    }
  }
  size_t len = 0;
  for (const iovec& v : iov) {
    if (v.iov_len > wire::kMaxMessageSize || len + v.iov_len > wire::kMaxMessageSize) {
      len = wire::kMaxMessageSize + 1;
      break;
    }
    len += v.iov_len;
  }

  RdsEndpoint source;
  absl::Duration sndtimeo;
  {
    absl::MutexLock lock(&rs.mu);
    if (rs.released) return RdsError(EBADF);
    if (!named && rs.connected) {
      dest = *rs.connected;
      if (rs.bound) dest.addr.scope_id = dest.addr.IsLinkLocal() ? rs.bound->addr.scope_id : 0;
    }
    if (!rs.bound || (!named && !rs.connected)) return RdsError(ENOTCONN);
    source = *rs.bound;
    if (named) {
      if (source.addr.IsV4Mapped() != dest.addr.IsV4Mapped()) return RdsError(EOPNOTSUPP);
      if (source.addr.IsLinkLocal() && dest.addr.IsLinkLocal() &&
          source.addr.scope_id != dest.addr.scope_id) {
        return RdsError(EINVAL);
      }
    }
    if (len > wire::kMaxMessageSize) return RdsError(EMSGSIZE);
    if (len > static_cast<size_t>(rs.RdsSndbuf())) return RdsError(EMSGSIZE);
    sndtimeo = rs.sndtimeo;
  }
  if (absl::Status s = CheckControl(msg, flags); !s.ok()) return s;

  auto m = std::make_shared<Message>();
  m->payload = Payload(len);
  if (absl::Status s = usercopy::FromUserIov(m->payload.data(), iov.data(), iov.size(), len);
      !s.ok()) {
    return s;
  }
  stats::Add(stats::kCopyFromUser, len);
  m->header.len = static_cast<uint32_t>(len);
  m->header.sport = source.port;
  m->header.dport = dest.port;
  m->saddr = source.addr;
  m->daddr = dest.addr;

  // Send-buffer admission (rds_send_queue_rm): the count *before* adding this
  // message must be below the RDS sndbuf.
  Waiter* waiter = nullptr;
  std::optional<absl::Time> deadline;
  if (sndtimeo != absl::InfiniteDuration()) deadline = absl::Now() + sndtimeo;
  for (;;) {
    absl::MutexLock lock(&rs.mu);
    if (waiter) rs.RemoveWaiterLocked(waiter);
    if (rs.released) return RdsError(EBADF);
    if (rs.snd_bytes < static_cast<size_t>(rs.RdsSndbuf())) {
      rs.snd_bytes += len;
      rs.has_sent = true;
      break;
    }
    stats::Inc(stats::kSendQueueFull);
    if (rs.nonblocking || (flags & MSG_DONTWAIT)) return RdsError(EAGAIN);
    waiter = &Waiter::ForThisThread();
    rs.AddWaiterLocked(waiter);
    rs.mu.Unlock();
    absl::Status slept = waiter->Sleep(deadline);
    rs.mu.Lock();
    if (!slept.ok()) {
      rs.RemoveWaiterLocked(waiter);
      // Space may have appeared just as the timer fired: take it.
      if (!rs.released && rs.snd_bytes < static_cast<size_t>(rs.RdsSndbuf())) {
        rs.snd_bytes += len;
        rs.has_sent = true;
        break;
      }
      return slept;
    }
  }
  m->sender = rs.shared_from_this();
  stats::Inc(stats::kSendQueued);
  Engine::Get().Submit(std::move(m), rs.ns);
  return len;
}

void ReleaseSendSpace(Message& m) {
  if (!m.sender) return;
  RdsSocket& rs = *m.sender;
  {
    absl::MutexLock lock(&rs.mu);
    size_t n = m.payload.size();
    rs.snd_bytes = rs.snd_bytes >= n ? rs.snd_bytes - n : 0;
    rs.WakeWaitersLocked();
  }
  m.sender.reset();
}

}  // namespace rds
