// engine/send.cc — the send path: validation, admission, hand-off.
#include "engine/send.h"

#include <arpa/inet.h>
#include <linux/rds.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/container/inlined_vector.h"
#include "absl/time/clock.h"
#include "engine/cong.h"
#include "engine/engine.h"
#include "engine/errors.h"
#include "engine/log.h"
#include "engine/rdma.h"
#include "engine/shm_arena.h"
#include "engine/share.h"
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

// The destination named in msg_name (rds_sendmsg's checks: the same rules
// as bind's address).
absl::Status ParseDestination(const msghdr& msg, RdsEndpoint* dest) {
  sockaddr_storage ss;
  if (absl::Status s = usercopy::SockaddrFromUser(static_cast<const sockaddr*>(msg.msg_name),
                                                  msg.msg_namelen, &ss);
      !s.ok()) {
    return s;
  }
  return ParseUnicastName(ss, msg.msg_namelen, dest);
}

// The application's control messages, copied once and walked as the kernel
// walks them (for_each_cmsghdr with CMSG_OK: a malformed one is EINVAL).
class ControlMessages {
 public:
  absl::Status Load(const msghdr& msg) {
    msg_ = msg;
    if (msg.msg_controllen == 0 || msg.msg_control == nullptr) {
      msg_.msg_controllen = 0;
      return absl::OkStatus();
    }
    if (msg.msg_controllen > (1u << 20)) return RdsError(ENOBUFS);
    bytes_.resize(msg.msg_controllen);
    if (absl::Status s = usercopy::FromUser(bytes_.data(), msg.msg_control, bytes_.size());
        !s.ok()) {
      return s;
    }
    msg_.msg_control = bytes_.data();
    return absl::OkStatus();
  }

  bool empty() const { return msg_.msg_controllen == 0; }

  // Calls fn(cmsg) for each SOL_RDS control message; stops at the first error.
  template <typename F>
  absl::Status ForEachRds(F&& fn) {
    if (msg_.msg_controllen == 0) return absl::OkStatus();
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg_); c != nullptr; c = CMSG_NXTHDR(&msg_, c)) {
      size_t offset = reinterpret_cast<uint8_t*>(c) - bytes_.data();
      if (c->cmsg_len < sizeof(cmsghdr) || c->cmsg_len > msg_.msg_controllen - offset) {
        return RdsError(EINVAL);
      }
      if (c->cmsg_level != SOL_RDS) continue;
      if (absl::Status s = fn(*c); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

 private:
  msghdr msg_{};
  std::vector<uint8_t> bytes_;
};

template <typename T>
absl::Status CmsgPayload(const cmsghdr& c, T* out) {
  if (c.cmsg_len < CMSG_LEN(sizeof(T))) return RdsError(EINVAL);
  std::memcpy(out, CMSG_DATA(&c), sizeof(T));
  return absl::OkStatus();
}

// rds_rdma_bytes: the RDMA byte count that counts against RDS_MAX_MSG_SIZE.
absl::StatusOr<uint64_t> RdmaBytes(ControlMessages& cm) {
  uint64_t bytes = 0;
  absl::Status s = cm.ForEachRds([&](const cmsghdr& c) -> absl::Status {
    if (c.cmsg_type != RDS_CMSG_RDMA_ARGS) return absl::OkStatus();
    rds_rdma_args args;
    if (absl::Status s = CmsgPayload(c, &args); !s.ok()) return s;
    bytes += args.remote_vec.bytes;
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return bytes;
}

// rds_rm_size: the shape of the control messages. Sets *has_cookie.
absl::Status CheckControlShape(ControlMessages& cm, int flags, bool* has_cookie) {
  int groups = 0;
  *has_cookie = false;
  absl::Status s = cm.ForEachRds([&](const cmsghdr& c) -> absl::Status {
    switch (c.cmsg_type) {
      case RDS_CMSG_RDMA_ARGS: {
        rds_rdma_args args;
        if (absl::Status s = CmsgPayload(c, &args); !s.ok()) return s;
        if (args.nr_local == 0) return RdsError(EINVAL);
        if (args.nr_local > 1024) return RdsError(EMSGSIZE);  // UIO_MAXIOV
        std::vector<rds_iovec> local(args.nr_local);
        if (absl::Status s = usercopy::FromUser(
                local.data(), reinterpret_cast<const void*>(args.local_vec_addr),
                local.size() * sizeof(rds_iovec));
            !s.ok()) {
          return s;
        }
        for (const rds_iovec& v : local) {
          // rds_pages_in_vec: an empty or wrapping vector has no pages.
          if (v.addr + v.bytes <= v.addr || v.bytes > UINT32_MAX) return RdsError(EINVAL);
        }
        groups |= 2;
        return absl::OkStatus();
      }
      case RDS_CMSG_ZCOPY_COOKIE:
        *has_cookie = true;
        groups |= 1;
        return absl::OkStatus();
      case RDS_CMSG_RDMA_DEST:
      case RDS_CMSG_RDMA_MAP:
        groups |= 1;
        return absl::OkStatus();
      case RDS_CMSG_ATOMIC_CSWP:
      case RDS_CMSG_ATOMIC_FADD:
      case RDS_CMSG_MASKED_ATOMIC_CSWP:
      case RDS_CMSG_MASKED_ATOMIC_FADD:
        groups |= 2;
        return absl::OkStatus();
      default:
        return RdsError(EINVAL);
    }
  });
  if (!s.ok()) return s;
  if ((flags & MSG_ZEROCOPY) && !*has_cookie) return RdsError(EINVAL);
  if (groups == 3) return RdsError(EINVAL);
  return absl::OkStatus();
}

// What rds_cmsg_send gives a message.
struct AppliedControl {
  std::optional<uint32_t> zcopy_cookie;
  std::optional<uint64_t> rdma_dest;  // an RDMA_DEST cookie of one of the socket's regions
  std::shared_ptr<MemoryRegion> rdma_region;
  std::shared_ptr<RdmaOp> rdma_op;
};

// Says once per process that atomics are missing.
void SayAtomicsMissing() {
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) {
    log::Warn("RDS_CMSG_*ATOMIC* on a socket over RDMA: rds-preload does not issue atomic "
              "operations (EOPNOTSUPP)");
  }
}

// rds_cmsg_send. TCP (and the same-host path, as the kernel's loopback) has
// neither memory registration, RDMA nor atomics; over RDMA the socket's
// regions may be offered (RDMA_DEST, RDMA_MAP) and RDMA operations ride on
// the message (engine/rdma.h).
absl::StatusOr<AppliedControl> ApplyControl(RdsSocket& rs, ControlMessages& cm, bool zcopy,
                                            int transport, bool local_dest) {
  AppliedControl out;
  bool unsupported_op = false;
  const bool rdma = transport == kTransIb;
  absl::Status s = cm.ForEachRds([&](const cmsghdr& c) -> absl::Status {
    switch (c.cmsg_type) {
      case RDS_CMSG_RDMA_ARGS: {
        rds_rdma_args args;
        if (absl::Status s = CmsgPayload(c, &args); !s.ok()) return s;
        if (out.rdma_op) return RdsError(EINVAL);  // one per message
        if (!rdma || local_dest) {
          unsupported_op = true;  // no xmit_rdma: EOPNOTSUPP once all are parsed
          return absl::OkStatus();
        }
        absl::StatusOr<std::shared_ptr<RdmaOp>> op = rdma::MakeOp(rs, args);
        if (!op.ok()) return op.status();
        out.rdma_op = *std::move(op);
        return absl::OkStatus();
      }
      case RDS_CMSG_RDMA_DEST: {
        uint64_t cookie = 0;
        if (absl::Status s = CmsgPayload(c, &cookie); !s.ok()) return s;
        if (out.rdma_dest) return RdsError(EINVAL);  // one per message
        absl::StatusOr<std::shared_ptr<MemoryRegion>> region = rdma::DestRegion(rs, cookie);
        if (!region.ok()) return region.status();  // no region has that key
        out.rdma_dest = cookie;
        out.rdma_region = *std::move(region);
        return absl::OkStatus();
      }
      case RDS_CMSG_RDMA_MAP: {
        rds_get_mr_args args;
        if (absl::Status s = CmsgPayload(c, &args); !s.ok()) return s;
        if (!rdma) return RdsError(EOPNOTSUPP);  // no get_mr
        if (out.rdma_dest) return RdsError(EINVAL);
        absl::StatusOr<uint64_t> cookie = rdma::MapForMessage(rs, args);
        if (!cookie.ok()) return cookie.status();
        absl::StatusOr<std::shared_ptr<MemoryRegion>> region = rdma::DestRegion(rs, *cookie);
        if (!region.ok()) return region.status();
        out.rdma_dest = *cookie;
        out.rdma_region = *std::move(region);
        return absl::OkStatus();
      }
      case RDS_CMSG_ZCOPY_COOKIE: {
        uint32_t v;
        if (!zcopy) return RdsError(EINVAL);  // no zerocopy notifier
        if (absl::Status s = CmsgPayload(c, &v); !s.ok()) return s;
        out.zcopy_cookie = v;
        return absl::OkStatus();
      }
      default: {  // atomics
        rds_atomic_args args;
        if (absl::Status s = CmsgPayload(c, &args); !s.ok()) return s;
        if (rdma) SayAtomicsMissing();
        unsupported_op = true;  // no xmit_atomic
        return absl::OkStatus();
      }
    }
  });
  if (!s.ok()) return s;
  if (unsupported_op) return RdsError(EOPNOTSUPP);
  return out;
}

absl::Status WaitForUncongested(RdsSocket& rs, const RdsEndpoint& dest, int flags) {
  CongestionTable& cong = CongestionTable::Get();
  const NetNsKey ns = rs.ns->key();
  if (!cong.IsCongested(ns, dest.addr, dest.port)) return absl::OkStatus();
  bool nonblocking;
  {
    rds::MutexLock lock(&rs.mu);
    nonblocking = rs.nonblocking || (flags & MSG_DONTWAIT);
    if (nonblocking && rs.cong_monitor) rs.cong_mask |= uint64_t{1} << (dest.port % 64);
  }
  if (nonblocking) {
    // Test again: an update may have arrived meanwhile.
    if (!cong.IsCongested(ns, dest.addr, dest.port)) return absl::OkStatus();
    stats::Inc(stats::kCongSendError);
    rds::MutexLock lock(&rs.mu);
    rs.seen_congestion = true;
    return RdsError(ENOBUFS);
  }
  stats::Inc(stats::kCongSendBlocked);
  Waiter& waiter = Waiter::ForThisThread();
  for (;;) {
    cong.AddWaiter(&waiter);
    if (!cong.IsCongested(ns, dest.addr, dest.port)) {
      cong.RemoveWaiter(&waiter);
      return absl::OkStatus();
    }
    absl::Status slept = waiter.Sleep(std::nullopt);
    cong.RemoveWaiter(&waiter);
    if (!slept.ok()) {
      rds::MutexLock lock(&rs.mu);
      rs.seen_congestion = true;
      return slept;
    }
  }
}

// Storage for a message's payload: a block of the shared arena when the
// payload is large and bound for this host (docs/perf/history.md §9.6), else the pools.
Payload NewSendPayload(size_t len, bool local_dest) {
  if (local_dest && len >= ShmArena::kMinBlock) {
    if (std::shared_ptr<ShmArena> arena = ShmArena::Get()) {
      if (std::optional<Payload> p = arena->Allocate(len)) return std::move(*p);
      stats::Inc(stats::kShimShmArenaFull);
    }
  }
  return Payload(len);
}

}  // namespace

absl::StatusOr<size_t> SendMsg(RdsSocket& rs, const msghdr& msg, int flags) {
  if (rs.remote.load(std::memory_order_acquire)) {
    absl::StatusOr<size_t> r = share::SendMsg(rs, msg, flags);
    if (!share::Adopted(r.status())) return r;
  }
  if (flags & ~kAllowedFlags) return RdsError(EOPNOTSUPP);

  RdsEndpoint dest;
  const bool named = msg.msg_namelen != 0;
  if (named) {
    if (absl::Status s = ParseDestination(msg, &dest); !s.ok()) return s;
  }

  // The iovec array is application memory.
  if (msg.msg_iovlen > IOV_MAX) return RdsError(EMSGSIZE);
  // Most callers pass one or two segments: no allocation for those.
  absl::InlinedVector<iovec, 4> iov(msg.msg_iovlen);
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
  size_t sndbuf;
  bool zcopy;
  int transport;
  // Send-buffer admission, taken with the settings when there is room (one
  // lock hold per sendmsg instead of two, docs/perf/history.md §9.7) and given back if
  // the send fails before its message is queued.
  bool admitted = false;
  bool had_sent = false;
  // Admitted with the send buffer at least half full: the receiver should
  // acknowledge at once, or this sender soon waits for space.
  bool half_full = false;
  auto give_back = [&] {
    if (!admitted) return;
    admitted = false;
    std::shared_ptr<RdsSocket> pin;  // dropped after the lock
    rds::MutexLock lock(&rs.mu);
    pin = rs.ReleaseLocked(len, 1);
    rs.has_sent = had_sent;
    rs.WakeWaitersLocked();  // a sender may have found the buffer full because of us
  };
  absl::Cleanup give_back_on_failure = give_back;
  {
    rds::MutexLock lock(&rs.mu);
    if (rs.released) return RdsError(EBADF);
    if (!named && rs.connected) {
      dest = *rs.connected;
      if (rs.bound) dest.addr.scope_id = dest.addr.IsLinkLocal() ? rs.bound->addr.scope_id : 0;
    }
    if (!rs.bound || (!named && !rs.connected)) return RdsError(ENOTCONN);
    source = *rs.bound;
    if (named) {
      if (source.addr.IsV4Mapped() != dest.addr.IsV4Mapped()) return RdsError(EOPNOTSUPP);
      // A link-local binding only reaches the same link; unscoped
      // destinations inherit the bound scope.
      if (dest.addr.scope_id != source.addr.scope_id) {
        if (dest.addr.scope_id == 0) {
          if (dest.addr.IsLinkLocal()) dest.addr.scope_id = source.addr.scope_id;
        } else if (source.addr.scope_id != 0) {
          return RdsError(EINVAL);
        }
      }
    }
    sndtimeo = rs.sndtimeo;
    sndbuf = static_cast<size_t>(rs.RdsSndbuf());
    zcopy = (flags & MSG_ZEROCOPY) && rs.zerocopy;
    transport = rs.transport;
    if (len <= sndbuf && rs.snd_bytes < sndbuf) {
      had_sent = rs.has_sent;
      rs.AdmitLocked(len);
      admitted = true;
      half_full = rs.snd_bytes * 2 >= sndbuf;
    }
  }
  ControlMessages cm;
  if (absl::Status s = cm.Load(msg); !s.ok()) return s;
  // (Most sends carry no control messages: their walks are skipped.)
  uint64_t rdma_bytes = 0;
  if (!cm.empty()) {
    absl::StatusOr<uint64_t> bytes = RdmaBytes(cm);
    if (!bytes.ok()) return bytes.status();
    rdma_bytes = *bytes;
  }
  if (std::max<uint64_t>(len, rdma_bytes) > wire::kMaxMessageSize) return RdsError(EMSGSIZE);
  if (len > sndbuf) return RdsError(EMSGSIZE);
  if (zcopy && transport != kTransTcp) return RdsError(EOPNOTSUPP);
  bool has_cookie = false;
  if (!cm.empty() || (flags & MSG_ZEROCOPY)) {
    if (absl::Status s = CheckControlShape(cm, flags, &has_cookie); !s.ok()) return s;
  }

  // A same-host destination (another engine on this host, or this one) can
  // take a large payload by reference from the shared arena.
  const bool local_dest = rs.ns->IsLocalAddressCached(dest.addr);
  auto m = NewMessage();
  m->payload = NewSendPayload(len, local_dest);
  if (absl::Status s = usercopy::FromUserIov(m->payload.data(), iov.data(), iov.size(), len);
      !s.ok()) {
    return s;
  }
  stats::Add(stats::kCopyFromUser, len);
  if (!cm.empty()) {
    absl::StatusOr<AppliedControl> applied = ApplyControl(rs, cm, zcopy, transport, local_dest);
    if (!applied.ok()) return applied.status();
    m->zcopy_cookie = applied->zcopy_cookie;
    // The cookie travels in the header as the kernel's RDMA transport puts
    // it there (its loopback does not: a same-host receiver gets none).
    if (applied->rdma_dest && !local_dest) {
      wire::ExtWriter(&m->header).RdmaDest(*applied->rdma_dest);
      m->rdma_region = std::move(applied->rdma_region);
    }
    if (applied->rdma_op) {  // (groups exclusive: no RDMA_DEST record beside it)
      wire::ExtWriter(&m->header).Rdma(applied->rdma_op->rkey);
      m->rdma_op = std::move(applied->rdma_op);
    }
  }
  m->header.len = static_cast<uint32_t>(len);
  m->header.sport = source.port;
  m->header.dport = dest.port;
  m->saddr = source.addr;
  m->daddr = dest.addr;
  if (dest.port != 0 && local_dest) {
    absl::StatusOr<uint32_t> gen = rs.ns->ports().PortGeneration(dest.addr, dest.port);
    if (gen.ok()) m->port_gen = *gen;
  }

  // Congestion (rds_cong_wait, §A.4 step 10): non-blocking → ENOBUFS (noting
  // the port for RDS_CONG_MONITOR); blocking → sleep until the port clears,
  // with no timeout (SO_SNDTIMEO does not apply), interruptible by signals.
  // (A sender that may sleep here must not hold send space meanwhile.)
  if (admitted && CongestionTable::Get().IsCongested(rs.ns->key(), dest.addr, dest.port)) {
    give_back();
  }
  if (absl::Status s = WaitForUncongested(rs, dest, flags); !s.ok()) return s;

  // Send-buffer admission (rds_send_queue_rm): the count *before* adding this
  // message must be below the RDS sndbuf.
  Waiter* waiter = nullptr;
  std::optional<absl::Time> deadline;
  if (!admitted && sndtimeo != absl::InfiniteDuration()) deadline = absl::Now() + sndtimeo;
  while (!admitted) {
    rds::MutexLock lock(&rs.mu);
    if (waiter) rs.RemoveWaiterLocked(waiter);
    if (rs.released) return RdsError(EBADF);
    if (rs.snd_bytes < static_cast<size_t>(rs.RdsSndbuf())) {
      rs.AdmitLocked(len);
      admitted = true;
      half_full = rs.snd_bytes * 2 >= static_cast<size_t>(rs.RdsSndbuf());
      break;
    }
    stats::Inc(stats::kSendQueueFull);
    if (rs.nonblocking || (flags & MSG_DONTWAIT)) return RdsError(EAGAIN);
    waiter = &Waiter::ForThisThread();
    rs.AddWaiterLocked(waiter);
    rs.mu.Unlock();
    // (Not driving, unlike recvmsg: a sender that drove would park the loop
    // thread for a lease, leaving the acknowledgements of a stream unread
    // until the sender blocks again — 64 B stream rate -11%, docs/perf/history.md §9.10.)
    absl::Status slept = waiter->Sleep(deadline);
    rs.mu.Lock();
    if (!slept.ok()) {
      rs.RemoveWaiterLocked(waiter);
      // Space may have appeared just as the timer fired: take it.
      if (!rs.released && rs.snd_bytes < static_cast<size_t>(rs.RdsSndbuf())) {
        rs.AdmitLocked(len);
        admitted = true;
        half_full = true;
        break;
      }
      return slept;
    }
  }
  std::move(give_back_on_failure).Cancel();
  m->sender = &rs;  // kept alive by rs.in_flight_pin until released
  m->ack_soon = half_full;
  stats::Inc(stats::kSendQueued);
  Engine::Get().Submit(std::move(m));
  return len;
}

void ReleaseSendSpace(Message& m) {
  SendSpaceRelease release;
  release.Add(m);
}

void SendSpaceRelease::Add(Message& m) {
  if (!m.sender) return;
  if (m.sender != socket_) {
    Flush();
    socket_ = m.sender;
  }
  m.sender = nullptr;
  bytes_ += m.payload.size();
  ++msgs_;
  if (m.zcopy_cookie) cookies_.push_back(*m.zcopy_cookie);
}

void SendSpaceRelease::Flush() {
  if (!socket_) return;
  RdsSocket& rs = *socket_;
  std::shared_ptr<RdsSocket> pin;  // may be the last reference: dropped last
  {
    rds::MutexLock lock(&rs.mu);
    pin = rs.ReleaseLocked(bytes_, msgs_);
    if (!cookies_.empty() && !rs.released) {
      // The messages are done with the application's buffers: their zerocopy
      // completions are reported (rds_rm_zerocopy_callback).
      for (uint32_t c : cookies_) rs.zcookies.push_back(c);
      rs.NotifyLocked(/*arrival=*/true);
    } else {
      rs.WakeWaitersLocked();
    }
  }
  socket_ = nullptr;
  bytes_ = 0;
  msgs_ = 0;
  cookies_.clear();
}

}  // namespace rds
