// engine/sockopt.cc — socket options.
#include "engine/sockopt.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <linux/rds.h>
#include <sys/stat.h>
#include <sys/time.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "engine/engine.h"
#include "engine/errors.h"
#include "engine/info.h"
#include "engine/log.h"
#include "engine/rdma.h"
#include "engine/share.h"
#include "engine/socket.h"
#include "engine/sys.h"
#include "engine/usercopy.h"

namespace rds {
namespace {

absl::Duration TimevalToDuration(const timeval& tv) {
  if (tv.tv_sec == 0 && tv.tv_usec == 0) return absl::InfiniteDuration();
  return absl::Seconds(tv.tv_sec) + absl::Microseconds(tv.tv_usec);
}

// Re-reads what the kernel stored on the backing fd for an option we mirror.
void MirrorFromBacking(RdsSocket& rs, int fd, int name) {
  switch (name) {
    case SO_SNDBUF:
    case SO_SNDBUFFORCE:
    case SO_RCVBUF:
    case SO_RCVBUFFORCE: {
      int snd = 0, rcv = 0;
      socklen_t len = sizeof(int);
      sys::Getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &snd, &len);
      len = sizeof(int);
      sys::Getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, &len);
      rds::MutexLock lock(&rs.mu);
      rs.sk_sndbuf = snd;
      rs.sk_rcvbuf = rcv;
      rs.WakeWaitersLocked();  // a larger send buffer may admit a blocked sender
      break;
    }
    case SO_RCVTIMEO_OLD:
    case SO_RCVTIMEO_NEW:
    case SO_SNDTIMEO_OLD:
    case SO_SNDTIMEO_NEW: {
      bool rcv = name == SO_RCVTIMEO_OLD || name == SO_RCVTIMEO_NEW;
      timeval tv = {};
      socklen_t len = sizeof(tv);
      sys::Getsockopt(fd, SOL_SOCKET, rcv ? SO_RCVTIMEO_OLD : SO_SNDTIMEO_OLD, &tv, &len);
      rds::MutexLock lock(&rs.mu);
      (rcv ? rs.rcvtimeo : rs.sndtimeo) = TimevalToDuration(tv);
      break;
    }
    case SO_TIMESTAMP_OLD:
    case SO_TIMESTAMP_NEW: {
      int on = 0;
      socklen_t len = sizeof(on);
      sys::Getsockopt(fd, SOL_SOCKET, name, &on, &len);
      rds::MutexLock lock(&rs.mu);
      if (on) {
        rs.timestamp = name == SO_TIMESTAMP_NEW ? RdsSocket::Timestamp::kNew
                                                : RdsSocket::Timestamp::kOld;
      } else {
        rs.timestamp = RdsSocket::Timestamp::kOff;
      }
      break;
    }
    default:
      break;
  }
}

absl::Status SetGeneric(RdsSocket& rs, int fd, int name, const void* optval, socklen_t optlen) {
  switch (name) {
    case SO_DOMAIN:
    case SO_TYPE:
    case SO_PROTOCOL:
      return RdsError(ENOPROTOOPT);
    case SO_PEEK_OFF:
      return RdsError(EOPNOTSUPP);  // RDS has no set_peek_off
    case SO_ZEROCOPY: {
      if (optlen < sizeof(int)) return RdsError(EINVAL);
      int v;
      if (absl::Status s = usercopy::FromUser(&v, optval, sizeof(v)); !s.ok()) return s;
      if (v != 0 && v != 1) return RdsError(EINVAL);
      rds::MutexLock lock(&rs.mu);
      rs.zerocopy = v;
      return absl::OkStatus();
    }
    default:
      break;
  }
  // The kernel's generic layer validates and stores the option on the
  // backing fd (it reads the application's buffer itself: EFAULT included).
  if (sys::Setsockopt(fd, SOL_SOCKET, name, optval, optlen) != 0) return RdsError(errno);
  MirrorFromBacking(rs, fd, name);
  return absl::OkStatus();
}

absl::StatusOr<int> GetGeneric(RdsSocket& rs, int fd, int name, void* optval, socklen_t* optlen) {
  int value;
  switch (name) {
    case SO_DOMAIN: value = AF_RDS; break;
    case SO_TYPE: value = SOCK_SEQPACKET; break;
    case SO_PROTOCOL: value = 0; break;
    case SO_ZEROCOPY: {
      rds::MutexLock lock(&rs.mu);
      value = rs.zerocopy;
      break;
    }
    case SO_PEEK_OFF: value = -1; break;  // never enabled on RDS
    default:
      if (sys::Getsockopt(fd, SOL_SOCKET, name, optval, optlen) != 0) return RdsError(errno);
      return 0;
  }
  // sock_getsockopt: negative length EINVAL, copy min(len, sizeof(int)).
  int len;
  if (absl::Status s = usercopy::FromUser(&len, optlen, sizeof(len)); !s.ok()) return s;
  if (len < 0) return RdsError(EINVAL);
  int n = std::min<int>(len, sizeof(int));
  if (absl::Status s = usercopy::ToUser(optval, &value, n); !s.ok()) return s;
  if (absl::Status s = usercopy::ToUser(optlen, &n, sizeof(n)); !s.ok()) return s;
  return 0;
}

absl::Status SetBool(const void* optval, socklen_t optlen, bool* out) {
  if (optlen < sizeof(int)) return RdsError(EINVAL);
  int v;
  if (absl::Status s = usercopy::FromUser(&v, optval, sizeof(v)); !s.ok()) return s;
  *out = v != 0;
  return absl::OkStatus();
}

absl::Status CancelSentTo(RdsSocket& rs, const void* optval, socklen_t optlen) {
  {
    rds::MutexLock lock(&rs.mu);
    if (!rs.bound) return RdsError(ENOTCONN);
  }
  if (optlen < sizeof(sockaddr_in)) return RdsError(EINVAL);
  RdsEndpoint dest;
  if (optlen < sizeof(sockaddr_in6)) {
    sockaddr_in sin;
    if (absl::Status s = usercopy::FromUser(&sin, optval, sizeof(sin)); !s.ok()) return s;
    dest = {RdsAddr::FromV4(sin.sin_addr), ntohs(sin.sin_port)};
  } else {
    sockaddr_in6 sin6;
    if (absl::Status s = usercopy::FromUser(&sin6, optval, sizeof(sin6)); !s.ok()) return s;
    dest = {RdsAddr::FromV6(sin6.sin6_addr, sin6.sin6_scope_id), ntohs(sin6.sin6_port)};
  }
  Engine::Get().CancelSentTo(rs.shared_from_this(), dest);
  return absl::OkStatus();
}

bool InInitialNetNs(const RdsSocket& rs) {
  struct stat st;
  if (sys::Stat("/proc/1/ns/net", &st) != 0) return true;  // cannot tell: assume so
  NetNsKey init{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
  return rs.ns->key() == init;
}

absl::Status SetTransport(RdsSocket& rs, const void* optval, socklen_t optlen) {
  rds::MutexLock lock(&rs.mu);
  if (rs.transport != kTransNone) return RdsError(EOPNOTSUPP);
  if (optlen != sizeof(int)) return RdsError(EINVAL);
  int t;
  if (absl::Status s = usercopy::FromUser(&t, optval, sizeof(t)); !s.ok()) return s;
  if (t < 0 || t >= RDS_TRANS_COUNT) return RdsError(EINVAL);
  if (t != RDS_TRANS_TCP && !InInitialNetNs(rs)) return RdsError(EPROTOTYPE);
  // TCP always; IB where RDS over RDMA is (transports/verbs: a device, and
  // rdma-core); slot 1 is the retired iWARP one. Otherwise the kernel's
  // "module not available".
  if (t == RDS_TRANS_TCP) {
    rs.transport = kTransTcp;
  } else if (t == RDS_TRANS_IB && Engine::Get().RdmaAvailable()) {
    rs.transport = kTransIb;
  } else {
    return RdsError(ENOPROTOOPT);
  }
  return absl::OkStatus();
}

// Oracle UEK's SOL_RDS numbering, which rds-tools is compiled with
// (rds-tools.md §2): option 8 with a 12-byte struct rds_reset is
// RDS_CONN_RESET (upstream's 8, SO_RDS_TRANSPORT, takes an int), 11 is
// RDS6_CONN_RESET, 12 is SO_RDS_INQ. Upstream kernels have none of these.
struct UekReset {
  uint8_t tos;
  in_addr src;
  in_addr dst;
};
struct UekReset6 {
  uint8_t tos;
  in6_addr src;
  in6_addr dst;
};
constexpr int kUekConnReset = 8;
constexpr int kUekConn6Reset = 11;
constexpr int kUekSoRdsInq = 12;
static_assert(sizeof(UekReset) == 12 && sizeof(UekReset6) == 36);

absl::Status ConnReset(RdsSocket& rs, const void* optval, socklen_t optlen, bool v6) {
  RdsAddr src, dst;
  if (v6) {
    UekReset6 r;
    if (optlen != sizeof(r)) return RdsError(EINVAL);
    if (absl::Status s = usercopy::FromUser(&r, optval, sizeof(r)); !s.ok()) return s;
    src = RdsAddr::FromV6(r.src, 0);
    dst = RdsAddr::FromV6(r.dst, 0);
  } else {
    UekReset r;
    if (optlen != sizeof(r)) return RdsError(EINVAL);
    if (absl::Status s = usercopy::FromUser(&r, optval, sizeof(r)); !s.ok()) return s;
    src = RdsAddr::FromV4(r.src);
    dst = RdsAddr::FromV4(r.dst);
  }
  // Drops the connection's links; queued and unacknowledged messages are
  // sent again once it reconnects (UEK rds_user_reset: 0 whether or not a
  // connection existed).
  Engine::Get().ResetConnectionsHostWide(rs.ns->key(), src, dst);
  return absl::OkStatus();
}

absl::Status SetRxPathLatency(RdsSocket& rs, const void* optval, socklen_t optlen) {
  rds_rx_trace_so trace;
  if (optlen != sizeof(trace)) return RdsError(EFAULT);
  if (absl::Status s = usercopy::FromUser(&trace, optval, sizeof(trace)); !s.ok()) return s;
  if (trace.rx_traces > RDS_MSG_RX_DGRAM_TRACE_MAX) return RdsError(EFAULT);
  rds::MutexLock lock(&rs.mu);
  rs.rx_trace_count = trace.rx_traces;
  for (int i = 0; i < trace.rx_traces; ++i) {
    if (trace.rx_trace_pos[i] >= RDS_MSG_RX_DGRAM_TRACE_MAX) {
      rs.rx_trace_count = 0;
      return RdsError(EFAULT);
    }
    rs.rx_trace_pos[i] = trace.rx_trace_pos[i];
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SetSockOpt(RdsSocket& rs, int fd, int level, int name, const void* optval,
                        socklen_t optlen) {
  if (rs.remote.load(std::memory_order_acquire)) {
    if (level == SOL_RDS &&
        (name == RDS_GET_MR || name == RDS_GET_MR_FOR_DEST || name == RDS_FREE_MR)) {
      // The socket's owner is another process: it cannot register this
      // process's memory (its own would be named by the address).
      log::Warn("RDS_GET_MR / RDS_FREE_MR on a socket another process owns (inherited or "
                "passed): memory registration needs the owning process (EOPNOTSUPP)");
      return RdsError(EOPNOTSUPP);
    }
    absl::Status s = share::SetSockOpt(rs, level, name, optval, optlen);
    if (!share::Adopted(s)) return s;
  }
  if (level == SOL_SOCKET) return SetGeneric(rs, fd, name, optval, optlen);
  if (level != SOL_RDS) return RdsError(ENOPROTOOPT);
  switch (name) {
    case RDS_CANCEL_SENT_TO:
      return CancelSentTo(rs, optval, optlen);
    case RDS_GET_MR:
    case RDS_GET_MR_FOR_DEST:
    case RDS_FREE_MR:
      return rdma::SetMemoryOption(rs, name, optval, optlen);
    case RDS_RECVERR: {
      bool v;
      if (absl::Status s = SetBool(optval, optlen, &v); !s.ok()) return s;
      rds::MutexLock lock(&rs.mu);
      rs.recverr = v;
      return absl::OkStatus();
    }
    case RDS_CONG_MONITOR: {
      bool v;
      if (absl::Status s = SetBool(optval, optlen, &v); !s.ok()) return s;
      rds::MutexLock lock(&rs.mu);
      rs.cong_monitor = v;
      if (!v) {
        rs.cong_mask = 0;
        rs.cong_notify = 0;
        rs.DrainTokensLocked(fd);  // nothing to read any more, perhaps
      }
      return absl::OkStatus();
    }
    case SO_RDS_TRANSPORT:  // == kUekConnReset: the length tells them apart
      if (optlen == sizeof(UekReset)) return ConnReset(rs, optval, optlen, false);
      return SetTransport(rs, optval, optlen);
    case kUekConn6Reset:  // unknown upstream: only UEK's exact struct means reset
      if (optlen != sizeof(UekReset6)) return RdsError(ENOPROTOOPT);
      return ConnReset(rs, optval, optlen, true);
    case kUekSoRdsInq: {
      bool v;
      if (absl::Status s = SetBool(optval, optlen, &v); !s.ok()) return s;
      rds::MutexLock lock(&rs.mu);
      rs.inq = v;
      return absl::OkStatus();
    }
    case SO_RDS_MSG_RXPATH_LATENCY:
      return SetRxPathLatency(rs, optval, optlen);
    case SO_TIMESTAMP_OLD:
    case SO_TIMESTAMP_NEW:
      if (optlen != sizeof(int)) return RdsError(EFAULT);
      return SetGeneric(rs, fd, name, optval, optlen);
    default:
      return RdsError(ENOPROTOOPT);
  }
}

absl::StatusOr<int> GetSockOpt(RdsSocket& rs, int fd, int level, int name, void* optval,
                               socklen_t* optlen) {
  if (rs.remote.load(std::memory_order_acquire)) {
    absl::StatusOr<int> r = share::GetSockOpt(rs, level, name, optval, optlen);
    if (!share::Adopted(r.status())) return r;
  }
  if (level == SOL_SOCKET) return GetGeneric(rs, fd, name, optval, optlen);
  if (level != SOL_RDS) return RdsError(ENOPROTOOPT);
  int len;
  if (absl::Status s = usercopy::FromUser(&len, optlen, sizeof(len)); !s.ok()) return s;
  if (name >= RDS_INFO_FIRST && name <= RDS_INFO_LAST) return InfoGetSockOpt(rs, name, optval, optlen);
  int value;
  switch (name) {
    case RDS_RECVERR: {
      rds::MutexLock lock(&rs.mu);
      value = rs.recverr;
      break;
    }
    case SO_RDS_TRANSPORT: {
      rds::MutexLock lock(&rs.mu);
      value = rs.transport;
      break;
    }
    default:
      return RdsError(ENOPROTOOPT);
  }
  // The kernel compares the int length with sizeof(int) as unsigned values.
  if (static_cast<unsigned>(len) < sizeof(int)) return RdsError(EINVAL);
  if (absl::Status s = usercopy::ToUser(optval, &value, sizeof(value)); !s.ok()) return s;
  int out = sizeof(int);
  if (absl::Status s = usercopy::ToUser(optlen, &out, sizeof(out)); !s.ok()) return s;
  return 0;
}

}  // namespace rds
