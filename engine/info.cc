// engine/info.cc — RDS_INFO_* producers and length negotiation.
#include "engine/info.h"

#include <arpa/inet.h>
#include <linux/rds.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "engine/errors.h"
#include "engine/log.h"
#include "engine/socket.h"
#include "engine/stats.h"
#include "engine/usercopy.h"

namespace rds {
namespace {

// One producer's answer: `each`-sized items, already laid out.
struct Items {
  size_t each = 0;
  std::vector<uint8_t> bytes;
  // The kernel's counters producer copies nothing when not all items fit.
  size_t count() const { return each ? bytes.size() / each : 0; }
};

template <typename T>
void Append(Items* items, const T& item) {
  const auto* p = reinterpret_cast<const uint8_t*>(&item);
  items->bytes.insert(items->bytes.end(), p, p + sizeof(T));
}

Items Counters() {
  Items items{sizeof(rds_info_counter), {}};
  for (int c = 0; c < stats::kNumCounters; ++c) {
    rds_info_counter ctr = {};
    std::strncpy(reinterpret_cast<char*>(ctr.name), stats::Name(static_cast<stats::Counter>(c)),
                 sizeof(ctr.name) - 1);
    ctr.value = stats::Get(static_cast<stats::Counter>(c));
    Append(&items, ctr);
  }
  return items;
}

Items Sockets(RdsSocket& caller, bool v6) {
  Items items{v6 ? sizeof(rds6_info_socket) : sizeof(rds_info_socket), {}};
  for (const std::shared_ptr<RdsSocket>& s : LiveSockets(caller.ns->key())) {
    absl::MutexLock lock(&s->mu);
    if (v6) {
      rds6_info_socket info = {};
      info.sndbuf = s->RdsSndbuf();
      info.rcvbuf = s->RdsRcvbuf();
      if (s->bound) {
        info.bound_addr = s->bound->addr.V6();
        info.bound_port = htons(s->bound->port);
      }
      if (s->connected) {
        info.connected_addr = s->connected->addr.V6();
        info.connected_port = htons(s->connected->port);
      }
      info.inum = s->inode;
      Append(&items, info);
    } else {
      if (!s->bound || !s->bound->addr.IsV4Mapped()) continue;
      rds_info_socket info = {};
      info.sndbuf = s->RdsSndbuf();
      info.rcvbuf = s->RdsRcvbuf();
      info.bound_addr = s->bound->addr.V4().s_addr;
      info.bound_port = htons(s->bound->port);
      if (s->connected && s->connected->addr.IsV4Mapped()) {
        info.connected_addr = s->connected->addr.V4().s_addr;
        info.connected_port = htons(s->connected->port);
      }
      info.inum = s->inode;
      Append(&items, info);
    }
  }
  return items;
}

}  // namespace

absl::StatusOr<int> InfoGetSockOpt(RdsSocket& rs, int name, void* optval, socklen_t* optlen) {
  int len = 0;
  if (absl::Status s = usercopy::FromUser(&len, optlen, sizeof(len)); !s.ok()) return s;
  if (len < 0) return RdsError(EINVAL);
  Items items;
  switch (name) {
    case RDS_INFO_COUNTERS: items = Counters(); break;
    case RDS_INFO_SOCKETS: items = Sockets(rs, false); break;
    case RDS6_INFO_SOCKETS: items = Sockets(rs, true); break;
    default:
      // Connections, message queues and TCP sockets are published with the
      // host-wide RDS_INFO support (issue 5); until then they are reported as
      // an option this kernel does not have.
      log::Info("getsockopt(SOL_RDS, %d): RDS_INFO option not provided by rds-preload yet", name);
      return RdsError(ENOPROTOOPT);
  }
  int total = static_cast<int>(items.bytes.size());
  if (total > len) {
    int need = total;
    if (absl::Status s = usercopy::ToUser(optlen, &need, sizeof(need)); !s.ok()) return s;
    return RdsError(ENOSPC);
  }
  if (total > 0) {
    if (absl::Status s = usercopy::ToUser(optval, items.bytes.data(), items.bytes.size()); !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = usercopy::ToUser(optlen, &total, sizeof(total)); !s.ok()) return s;
  return static_cast<int>(items.each);
}

}  // namespace rds
