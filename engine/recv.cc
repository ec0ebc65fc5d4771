// engine/recv.cc — delivery into sockets and recvmsg(2).
#include "engine/recv.h"

#include <linux/rds.h>
#include <sys/time.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/container/inlined_vector.h"
#include "absl/time/clock.h"
#include "engine/cong.h"
#include "engine/direct_receive.h"
#include "engine/engine.h"
#include "engine/errors.h"
#include "engine/rdma.h"
#include "engine/share.h"
#include "engine/socket.h"
#include "engine/stats.h"
#include "engine/usercopy.h"
#include "engine/waiter.h"

namespace rds {
int64_t MonotonicNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

namespace {

// Appends one control message as the kernel's put_cmsg does: a control
// buffer too small for it sets MSG_CTRUNC and copies what fits.
class CmsgWriter {
 public:
  explicit CmsgWriter(msghdr& msg) : msg_(&msg), base_(static_cast<uint8_t*>(msg.msg_control)) {}

  absl::Status Put(int level, int type, const void* data, size_t len) {
    size_t room = msg_->msg_controllen - used_;
    if (msg_->msg_control == nullptr || room < sizeof(cmsghdr)) {
      msg_->msg_flags |= MSG_CTRUNC;
      return absl::OkStatus();
    }
    size_t cmlen = CMSG_LEN(len);
    if (room < cmlen) {
      msg_->msg_flags |= MSG_CTRUNC;
      cmlen = room;
    }
    std::vector<uint8_t> buf(cmlen, 0);
    auto* h = reinterpret_cast<cmsghdr*>(buf.data());
    h->cmsg_level = level;
    h->cmsg_type = type;
    h->cmsg_len = CMSG_LEN(len);
    std::memcpy(buf.data() + sizeof(cmsghdr), data, cmlen - sizeof(cmsghdr));
    if (absl::Status s = usercopy::ToUser(base_ + used_, buf.data(), cmlen); !s.ok()) return s;
    used_ += std::min(CMSG_SPACE(len), room);
    return absl::OkStatus();
  }
  size_t used() const { return used_; }

 private:
  msghdr* msg_;
  uint8_t* base_;
  size_t used_ = 0;
};

constexpr int kUekCmsgInq = 12;  // Oracle UEK's RDS_CMSG_INQ (rds-tools.md §2.2)

// Up to RDS_MAX_ZCOOKIES completions, in completion order.
rds_zcopy_cookies TakeCookies(RdsSocket& rs) ABSL_EXCLUSIVE_LOCKS_REQUIRED(rs.mu) {
  rds_zcopy_cookies done = {};
  while (!rs.zcookies.empty() && done.num < RDS_MAX_ZCOOKIES) {
    done.cookies[done.num++] = rs.zcookies.front();
    rs.zcookies.pop_front();
  }
  return done;
}

absl::Status PutTimestamp(CmsgWriter& cm, RdsSocket::Timestamp kind, absl::Time at) {
  if (kind == RdsSocket::Timestamp::kOld) {
    timeval tv = absl::ToTimeval(at);
    return cm.Put(SOL_SOCKET, SO_TIMESTAMP_OLD, &tv, sizeof(tv));
  }
  struct {
    int64_t sec;
    int64_t usec;
  } tv64 = {absl::ToUnixSeconds(at), absl::ToInt64Microseconds(at - absl::FromUnixSeconds(absl::ToUnixSeconds(at)))};
  return cm.Put(SOL_SOCKET, SO_TIMESTAMP_NEW, &tv64, sizeof(tv64));
}

// What queueing records on a message (time stamps, trace point, counters).
void Arrived(RdsSocket& rs, Message& m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(rs.mu) {
  if (rs.timestamp != RdsSocket::Timestamp::kOff) m.received_at = absl::Now();
  // The queueing trace point costs a clock read per message: taken only for
  // a socket that asked for SO_RDS_MSG_RXPATH_LATENCY (as the kernel does).
  if (rs.rx_trace_count > 0) {
    m.rx_trace[2] = MonotonicNs();
    if (m.rx_trace[0] == 0) m.rx_trace[0] = m.rx_trace[1] = m.rx_trace[2];
  }
  stats::Add(stats::kRecvBytesAddedToSock, m.payload.size());
  stats::Inc(stats::kRecvQueued);
}

void Queue(RdsSocket& rs, MessagePtr m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(rs.mu) {
  Arrived(rs, *m);
  // rds_recv_incoming_exthdrs: a peer's RDMA into one of our regions.
  if (wire::HasExtHeaders(m->header)) rdma::OnArrivalLocked(rs, wire::ParseExtHeaders(m->header));
  rs.rcv_bytes += m->payload.size();
  rs.recv_queue.push_back(std::move(m));
  rs.NotifyLocked(/*arrival=*/true);
}


// A message taken by a recvmsg whose copy out failed goes back to the head
// of the queue.
void RequeueFront(RdsSocket& rs, MessagePtr m) {
  std::optional<ReceiveCongestionChange> change;
  {
    rds::MutexLock lock(&rs.mu);
    if (rs.released) return;
    rs.rcv_bytes += m->payload.size();
    rs.recv_queue.push_front(std::move(m));
    rs.NotifyLocked(/*arrival=*/true);
    change = ReceiveCongestionChangeLocked(rs);
  }
  if (change) PublishReceiveCongestion(rs, *change);
}

}  // namespace


DeliverResult Deliver(RdsSocket& rs, MessagePtr&& m, bool refuse_over_hard_limit) {
  std::optional<ReceiveCongestionChange> change;
  {
    rds::MutexLock lock(&rs.mu);
    if (rs.released) {
      if (rs.parked) return DeliverResult::kParked;
      stats::Inc(stats::kRecvDropDeadSock);
      return DeliverResult::kDropped;
    }
    if (refuse_over_hard_limit && rs.OverHardLimitLocked()) return DeliverResult::kRefused;
    Queue(rs, std::move(m));
    change = ReceiveCongestionChangeLocked(rs);
  }
  if (change) PublishReceiveCongestion(rs, *change);
  return DeliverResult::kQueued;
}


bool DeliverDirect(RdsSocket& rs, MessagePtr& m, DirectReceive& offer) {
  rds::MutexLock lock(&rs.mu);
  if (rs.released || rs.direct != &offer) return false;
  rs.direct = nullptr;
  Arrived(rs, *m);
  stats::Inc(stats::kShimRecvDirect);
  offer.Complete(std::move(m));
  return true;
}

absl::StatusOr<size_t> RecvMsg(RdsSocket& rs, int fd, msghdr& msg, int flags) {
  if (rs.remote.load(std::memory_order_acquire)) {
    absl::StatusOr<size_t> r = share::RecvMsg(rs, fd, msg, flags);
    if (!share::Adopted(r.status())) return r;
  }
  const int user_namelen = static_cast<int>(msg.msg_namelen);
  msg.msg_flags = flags & MSG_CMSG_CLOEXEC;
  msg.msg_namelen = 0;
  if (flags & MSG_OOB) {
    msg.msg_controllen = 0;
    return 0;
  }
  // The generic error queue (sock_recv_errqueue): RDS over TCP never queues
  // anything there.
  if (flags & MSG_ERRQUEUE) return RdsError(EAGAIN);
  if (msg.msg_iovlen > IOV_MAX) return RdsError(EMSGSIZE);
  // Most callers pass one or two segments: no allocation for those.
  absl::InlinedVector<iovec, 4> iov(msg.msg_iovlen);
  if (!iov.empty()) {
    if (absl::Status s = usercopy::FromUser(iov.data(), msg.msg_iov, iov.size() * sizeof(iovec));
        !s.ok()) {
      return s;
    }
  }
  size_t room = 0;
  for (const iovec& v : iov) room += v.iov_len;

  CmsgWriter cmsg(msg);
  Waiter* waiter = nullptr;
  std::optional<absl::Time> deadline;
  for (;;) {
    MessagePtr m;
    bool taken = false;         // dequeued (not MSG_PEEK): ours unless this call fails
    bool direct_taken = false;  // read into the caller's buffer, never queued
    bool inq = false;
    int inq_left = 0;           // UEK RDS_CMSG_INQ: bytes still queued after a taken message
    std::optional<ReceiveCongestionChange> change;
    std::optional<rds_cmsg_rx_trace> trace;
    std::optional<rds_zcopy_cookies> cookies;
    RdsSocket::Timestamp ts_kind = RdsSocket::Timestamp::kOff;
    std::optional<RdsEndpoint> bound;
    // What the message's ancillary data needs from the socket.
    auto snapshot = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(rs.mu) {
      ts_kind = rs.timestamp;
      bound = rs.bound;
      inq = rs.inq;
      if (rs.rx_trace_count > 0) {
        trace.emplace();
        std::memset(&*trace, 0, sizeof(*trace));
        trace->rx_traces = rs.rx_trace_count;
        for (int i = 0; i < rs.rx_trace_count; ++i) trace->rx_trace_pos[i] = rs.rx_trace_pos[i];
      }
      if (rs.zerocopy && !rs.zcookies.empty() && !(flags & MSG_PEEK)) cookies = TakeCookies(rs);
      inq_left = static_cast<int>(std::min<size_t>(rs.rcv_bytes, INT32_MAX));
    };
    {
      rds::MutexLock lock(&rs.mu);
      if (waiter) {
        rs.RemoveWaiterLocked(waiter);
        waiter = nullptr;
      }
      if (rs.released) return RdsError(EBADF);
      if (!rs.rdma_notify.empty()) {
        // rds_notify_queue_get: as many as the control buffer holds (at
        // least one, truncated), and nothing else; 0 bytes.
        size_t max = msg.msg_controllen / CMSG_SPACE(sizeof(rds_rdma_notify));
        if (max == 0) max = 1;
        while (max-- > 0 && !rs.rdma_notify.empty()) {
          rds_rdma_notify n{};
          n.user_token = rs.rdma_notify.front().token;
          n.status = rs.rdma_notify.front().status;
          if (absl::Status s = cmsg.Put(SOL_RDS, RDS_CMSG_RDMA_STATUS, &n, sizeof(n)); !s.ok()) {
            return s;
          }
          rs.rdma_notify.pop_front();
        }
        if (!rs.Readable()) rs.DrainTokensLocked(fd);
        msg.msg_controllen = cmsg.used();
        return 0;
      }
      if (rs.cong_monitor && rs.cong_notify != 0) {
        uint64_t notify = rs.cong_notify;
        if (absl::Status s = cmsg.Put(SOL_RDS, RDS_CMSG_CONG_UPDATE, &notify, sizeof(notify));
            !s.ok()) {
          return s;
        }
        rs.cong_notify = 0;  // consumed even without a control buffer (§A.5)
        rs.DrainTokensLocked(fd);
        msg.msg_controllen = cmsg.used();
        return 0;
      }
      if (!rs.recv_queue.empty()) {
        if (flags & MSG_PEEK) {
          m = rs.recv_queue.front();
        } else {
          // Taken now, in this one lock hold; put back should the copy fail
          // (where the kernel leaves it queued).
          m = std::move(rs.recv_queue.front());
          rs.recv_queue.pop_front();
          rs.rcv_bytes -= m->payload.size();
          rs.DrainTokensLocked(fd);
          change = ReceiveCongestionChangeLocked(rs);
          taken = true;
        }
        snapshot();
      } else {
        if (rs.nonblocking || (flags & MSG_DONTWAIT)) {
          // rds_recvmsg_zcookie: with room for it, a pending zerocopy
          // completion is returned instead of EAGAIN.
          if (rs.zerocopy && !rs.zcookies.empty() && msg.msg_control != nullptr &&
              msg.msg_controllen >= CMSG_SPACE(sizeof(rds_zcopy_cookies))) {
            rds_zcopy_cookies done = TakeCookies(rs);
            if (absl::Status s = cmsg.Put(SOL_RDS, RDS_CMSG_ZCOPY_COMPLETION, &done, sizeof(done));
                !s.ok()) {
              return s;
            }
            rs.DrainTokensLocked(fd);
            msg.msg_controllen = cmsg.used();
            return 0;
          }
          return RdsError(EAGAIN);
        }
        if (!deadline && rs.rcvtimeo != absl::InfiniteDuration()) {
          deadline = absl::Now() + rs.rcvtimeo;
        }
        waiter = &Waiter::ForThisThread();
        rs.AddWaiterLocked(waiter);
      }
    }
    if (waiter) {
      // One large buffer: offered for the next message to be read straight
      // into it (engine/direct_receive.h). Not with MSG_PEEK, which leaves
      // the message queued.
      std::shared_ptr<DirectReceive> direct;
      if (!(flags & MSG_PEEK) && !iov.empty() && iov[0].iov_len >= DirectReceive::kMinSize) {
        direct = DirectReceive::ForThisThread();
        direct->Prepare(static_cast<uint8_t*>(iov[0].iov_base), iov[0].iov_len, waiter);
      }
      absl::Status slept = Engine::Get().WaitDriving(*waiter, deadline, &rs, direct.get());
      if (direct) m = direct->TakeMessage();
      if (m) {
        rds::MutexLock lock(&rs.mu);
        rs.RemoveWaiterLocked(waiter);
        waiter = nullptr;
        taken = direct_taken = true;
        snapshot();
      } else {
        if (!slept.ok()) {
          rds::MutexLock lock(&rs.mu);
          rs.RemoveWaiterLocked(waiter);
          if (rs.released) return RdsError(EBADF);
          if (rs.recv_queue.empty()) return slept;
          waiter = nullptr;  // a message raced the timeout or signal: take it
        }
        continue;
      }
    }

    // Taking the message may have ended the socket's congestion: published
    // on every way out, so that the socket's state and the published one
    // stay equal.
    absl::Cleanup publish = [&] {
      if (change) PublishReceiveCongestion(rs, *change);
    };
    size_t len = m->payload.size();
    size_t n = std::min(len, room);
    if (!direct_taken) {
      if (absl::Status s = usercopy::ToUserIov(iov.data(), iov.size(), m->payload.data(), n);
          !s.ok()) {
        // A failed payload copy leaves the message queued (kernel
        // rds_recvmsg); past this point a failure loses it, as there.
        if (taken) {
          if (change) PublishReceiveCongestion(rs, *change);
          change.reset();
          RequeueFront(rs, std::move(m));
        }
        return s;
      }
    }
    stats::Add(stats::kCopyToUser, n);
    if (len > room) msg.msg_flags |= MSG_TRUNC;
    if (msg.msg_name != nullptr) {
      sockaddr_storage ss;
      RdsAddr src = m->saddr;
      if (!src.IsV4Mapped() && bound) src.scope_id = bound->addr.scope_id;
      socklen_t klen = ToSockaddr(src, m->header.sport, &ss);
      size_t copy = std::min<size_t>(std::max(user_namelen, 0), klen);
      if (copy > 0) {
        if (absl::Status s = usercopy::ToUser(msg.msg_name, &ss, copy); !s.ok()) return s;
      }
      msg.msg_namelen = klen;
    }
    // rds_cmsg_recv's order: the RDMA_DEST cookie, the time stamp, the trace.
    if (wire::HasExtHeaders(m->header)) {
      if (std::optional<uint64_t> cookie = wire::ParseExtHeaders(m->header).rdma_dest) {
        if (absl::Status s = cmsg.Put(SOL_RDS, RDS_CMSG_RDMA_DEST, &*cookie, sizeof(*cookie));
            !s.ok()) {
          return s;
        }
      }
    }
    if (ts_kind != RdsSocket::Timestamp::kOff && m->received_at != absl::Time()) {
      if (absl::Status s = PutTimestamp(cmsg, ts_kind, m->received_at); !s.ok()) return s;
    }
    if (trace) {
      m->rx_trace[3] = MonotonicNs();
      // Queued before tracing was turned on: no intermediate points.
      if (m->rx_trace[2] == 0) m->rx_trace[0] = m->rx_trace[1] = m->rx_trace[2] = m->rx_trace[3];
      for (int i = 0; i < trace->rx_traces; ++i) {
        int j = trace->rx_trace_pos[i];
        trace->rx_trace[i] = static_cast<uint64_t>(m->rx_trace[j + 1] - m->rx_trace[j]);
      }
      if (absl::Status s = cmsg.Put(SOL_RDS, RDS_CMSG_RXPATH_LATENCY, &*trace, sizeof(*trace));
          !s.ok()) {
        return s;
      }
    }
    if (cookies) {
      if (absl::Status s = cmsg.Put(SOL_RDS, RDS_CMSG_ZCOPY_COMPLETION, &*cookies, sizeof(*cookies));
          !s.ok()) {
        return s;
      }
    }
    if (taken) {
      stats::Add(stats::kRecvBytesFreedFromSock, len);
      stats::Inc(stats::kRecvDelivered);
      // UEK RDS_CMSG_INQ: the bytes still queued after this message (0 tells
      // rds-stress to stop draining).
      if (inq) {
        if (absl::Status s = cmsg.Put(SOL_RDS, kUekCmsgInq, &inq_left, sizeof(inq_left)); !s.ok()) {
          return s;
        }
      }
    }
    msg.msg_controllen = cmsg.used();
    return (flags & MSG_TRUNC) ? len : n;
  }
}

}  // namespace rds
