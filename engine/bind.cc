// engine/bind.cc — bind(2) and the process's bind table.
#include "engine/bind.h"
#include "engine/abandon.h"

#include <arpa/inet.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "engine/sync.h"
#include "engine/engine.h"
#include "engine/errors.h"
#include "engine/sys.h"
#include "engine/log.h"
#include "engine/share.h"
#include "engine/socket.h"
#include "engine/usercopy.h"
#include "engine/wire.h"

namespace rds {
namespace {

struct BindKey {
  NetNsKey ns;
  RdsEndpoint local;
  friend bool operator==(const BindKey&, const BindKey&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const BindKey& k) {
    return H::combine(std::move(h), k.ns, k.local);
  }
};

struct Table {
  rds::Mutex mu;
  absl::flat_hash_map<BindKey, std::weak_ptr<RdsSocket>> sockets ABSL_GUARDED_BY(mu);
};

Table* table_ptr = new Table();
Table& table() { return *table_ptr; }
// Bumped with table().mu held after every change of the table.
std::atomic<uint64_t> g_epoch{1};

bool IsLoopbackAddress(const RdsAddr& a) {
  if (a.IsV4Mapped()) return (ntohl(a.V4().s_addr) >> 24) == 127;
  in6_addr v6 = a.V6();
  return IN6_IS_ADDR_LOOPBACK(&v6);
}

// Takes a port in this process's table and the host registry.
absl::Status TakePort(RdsSocket& rs, const RdsAddr& addr, uint16_t port)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(table().mu) {
  BindKey key{rs.ns->key(), {addr, port}};
  if (auto it = table().sockets.find(key); it != table().sockets.end() && !it->second.expired()) {
    return RdsError(EADDRINUSE);
  }
  if (absl::Status s = rs.ns->ports().Lock(addr, port, rs.id); !s.ok()) return s;
  return absl::OkStatus();
}

}  // namespace

absl::Status Bind(RdsSocket& rs, const sockaddr* uaddr, socklen_t len) {
  if (rs.remote.load(std::memory_order_acquire)) {
    absl::Status s = share::Bind(rs, uaddr, len);
    if (!share::Adopted(s)) return s;
  }
  RdsEndpoint want;
  sockaddr_storage ss;
  if (absl::Status s = usercopy::SockaddrFromUser(uaddr, len, &ss); !s.ok()) return s;
  if (absl::Status s = ParseUnicastName(ss, len, &want); !s.ok()) return s;

  int transport;
  {
    rds::MutexLock lock(&rs.mu);
    if (rs.released) return RdsError(EBADF);
    if (rs.bound) return RdsError(EINVAL);
    if (rs.connected && want.addr.IsLinkLocal() && rs.connected->addr.scope_id != 0 &&
        rs.connected->addr.scope_id != want.addr.scope_id) {
      return RdsError(EINVAL);
    }
    transport = rs.transport;
  }

  // Transport selection (rds_trans_get_preferred / laddr_check).
  bool local = rs.ns->IsLocalAddress(want.addr);
  // IB before TCP, as rds_trans_get_preferred tries them; an address on an
  // RDMA device takes IB (its connections to other hosts go over verbs).
  const bool rdma = local && !IsLoopbackAddress(want.addr) &&
                    Engine::Get().UsesRdma(rs.ns, want.addr);
  if (transport == kTransIb) {
    if (!rdma) return RdsError(ENOPROTOOPT);  // its laddr_check fails
  } else if (transport == kTransTcp) {
    if (!local) return RdsError(ENOPROTOOPT);
    if (rdma) {
      // A connection is the address pair's here, not the transport's too:
      // TCP beside RDMA from one address is not built. Loudly, not silently
      // over RDMA.
      log::Warn("bind to %s with SO_RDS_TRANSPORT TCP: the address is on an RDMA device, whose "
                "connections use RDMA verbs; forcing TCP there is not supported by rds-preload "
                "(RDS_PRELOAD_VERBS=0 uses TCP for every address)",
                want.addr.ToString());
      return RdsError(ENOPROTOOPT);
    }
  } else if (IsLoopbackAddress(want.addr)) {
    transport = kTransLoop;
  } else if (rdma) {
    transport = kTransIb;
  } else if (local) {
    transport = kTransTcp;
  } else {
    log::Info("bind to %s: not a local address of this network namespace", want.addr.ToString());
    return RdsError(EADDRNOTAVAIL);
  }
  // From here a failure also detaches a transport set by SO_RDS_TRANSPORT
  // (rds_bind clears rs_transport when rds_add_bound fails).
  auto detach = [&rs](absl::Status s) {
    rds::MutexLock lock(&rs.mu);
    if (!rs.bound) rs.transport = kTransNone;
    return s;
  };
  if (want.port == wire::kProbePort) return detach(RdsError(EINVAL));

  // Other processes must be able to reach this engine as soon as the port is
  // visible in the registry.
  if (absl::Status s = Engine::Get().Serve(rs.ns); !s.ok()) {
    log::Warn("cannot serve network namespace: %s", s.ToString());
  }

  rds::MutexLock table_lock(&table().mu);
  uint16_t port = want.port;
  absl::Status taken;
  if (port != 0) {
    taken = TakePort(rs, want.addr, port);
  } else {
    // A fork child must not start where its siblings do.
    uint32_t start = std::max<uint32_t>(static_cast<uint32_t>(sys::RandomU64() & 0xffff), 2);
    taken = RdsError(EADDRINUSE);
    for (uint32_t i = 0; i < 65536; ++i) {
      uint32_t candidate = (start + i) & 0xffff;
      if (candidate < 2) continue;  // 0 is "any", 1 is the probe port
      absl::Status s = TakePort(rs, want.addr, static_cast<uint16_t>(candidate));
      if (s.ok()) {
        port = static_cast<uint16_t>(candidate);
        taken = s;
        break;
      }
      if (ErrnoOf(s) != EADDRINUSE) {
        taken = s;
        break;
      }
    }
  }
  if (!taken.ok()) return detach(taken);

  rds::MutexLock lock(&rs.mu);
  if (rs.released || rs.bound) {
    rs.ns->ports().Unlock(want.addr, port);
    return RdsError(rs.released ? EBADF : EINVAL);
  }
  rs.bound = RdsEndpoint{want.addr, port};
  rs.transport = transport;
  table().sockets[BindKey{rs.ns->key(), *rs.bound}] = rs.weak_from_this();
  g_epoch.fetch_add(1, std::memory_order_release);
  rs.ns->ports().BumpPortGeneration(want.addr, port);
  rs.ns->ports().BumpBindGeneration();
  log::Debug("socket %016x bound to %s:%u", rs.id, want.addr.ToString(), port);
  return absl::OkStatus();
}

void Unbind(RdsSocket& rs) {
  std::optional<RdsEndpoint> bound;
  int port_fd;
  {
    rds::MutexLock lock(&rs.mu);
    bound = rs.bound;
    port_fd = std::exchange(rs.port_fd, -1);
  }
  if (!bound) return;
  rds::MutexLock table_lock(&table().mu);
  table().sockets.erase(BindKey{rs.ns->key(), *bound});
  g_epoch.fetch_add(1, std::memory_order_release);
  rs.ns->ports().BumpPortGeneration(bound->addr, bound->port);
  rs.ns->ports().Unlock(bound->addr, bound->port);
  // The open-file lock goes with the last descriptor of it, in any process.
  if (port_fd >= 0) sys::CloseInternal(port_fd);
  rs.ns->ports().BumpBindGeneration();
}

void UnbindParked(RdsSocket& rs) {
  std::optional<RdsEndpoint> bound;
  {
    rds::MutexLock lock(&rs.mu);
    bound = rs.bound;
  }
  if (!bound) return;
  rds::MutexLock table_lock(&table().mu);
  table().sockets.erase(BindKey{rs.ns->key(), *bound});
  g_epoch.fetch_add(1, std::memory_order_release);
  // The port has no owner until the process that takes the socket over has
  // it in its bind table (BindTakenOver): its claim alone must not route the
  // port's messages to it before it can deliver them.
  rs.ns->ports().SetPortSocket(bound->addr, bound->port, PortRegistry::kNoSocket);
  rs.ns->ports().BumpBindGeneration();
}

absl::Status BindTakenOver(RdsSocket& rs, int parked_port_fd) {
  std::optional<RdsEndpoint> bound;
  {
    rds::MutexLock lock(&rs.mu);
    bound = rs.bound;
  }
  if (!bound) {
    if (parked_port_fd >= 0) sys::CloseInternal(parked_port_fd);
    return absl::OkStatus();
  }
  if (absl::Status s = Engine::Get().Serve(rs.ns); !s.ok()) {
    log::Warn("cannot serve network namespace: %s", s.ToString());
  }
  rds::MutexLock table_lock(&table().mu);
  if (parked_port_fd >= 0) {
    // The port stays held by the open-file lock the holders share.
    rds::MutexLock lock(&rs.mu);
    rs.port_fd = parked_port_fd;
  } else if (absl::Status s = rs.ns->ports().Lock(bound->addr, bound->port, rs.id); !s.ok()) {
    return s;
  }
  table().sockets[BindKey{rs.ns->key(), *bound}] = rs.weak_from_this();
  g_epoch.fetch_add(1, std::memory_order_release);
  // Recorded last: senders route the port to this process from here on, and
  // this engine finds the socket in the table when their messages come.
  rs.ns->ports().SetPortSocket(bound->addr, bound->port, rs.id);
  rs.ns->ports().BumpBindGeneration();
  return absl::OkStatus();
}

std::shared_ptr<RdsSocket> FindBound(NetNsKey ns, const RdsEndpoint& local) {
  rds::ReaderMutexLock lock(&table().mu);
  auto it = table().sockets.find(BindKey{ns, local});
  if (it == table().sockets.end()) return nullptr;
  return it->second.lock();
}

uint64_t BindTableEpoch() { return g_epoch.load(std::memory_order_acquire); }

bool IsBoundHere(NetNsKey ns, const RdsEndpoint& local) { return FindBound(ns, local) != nullptr; }

void ResetBindTableAfterFork() {
  Abandon(table_ptr);
  table_ptr = new Table();
  g_epoch.fetch_add(1, std::memory_order_release);
}

}  // namespace rds
