// engine/addr.h — RDS addresses.
//
// Kernel RDS keeps every address as 16 bytes (IPv4 as v4-mapped IPv6) plus a
// scope id for link-local IPv6. RdsAddr is that value; this file also owns the
// conversions to and from sockaddr_in / sockaddr_in6 as rds_getname and
// rds_recvmsg produce them (a v4-mapped address is shown as sockaddr_in).
// Validation rules that differ per call (bind, connect, sendmsg) live in those
// calls' files; the predicates they use are here.
//
// Thread-safety: value types.
#ifndef RDS_ENGINE_ADDR_H_
#define RDS_ENGINE_ADDR_H_

#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <compare>
#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace rds {

struct RdsAddr {
  std::array<uint8_t, 16> bytes{};
  uint32_t scope_id = 0;

  static RdsAddr FromV4(in_addr v4);
  static RdsAddr FromV6(const in6_addr& v6, uint32_t scope_id);

  bool IsV4Mapped() const;
  bool IsAny() const;  // :: or mapped 0.0.0.0
  bool IsLinkLocal() const;  // fe80::/10 (never true for mapped addresses)
  in_addr V4() const;  // only meaningful if IsV4Mapped()
  in6_addr V6() const;
  std::string ToString() const;

  // Kernel rds_addr_cmp order: the 16 bytes as a big-endian number.
  friend std::strong_ordering operator<=>(const RdsAddr& a, const RdsAddr& b) {
    if (auto c = a.bytes <=> b.bytes; c != 0) return c;
    return a.scope_id <=> b.scope_id;
  }
  friend bool operator==(const RdsAddr& a, const RdsAddr& b) = default;
  template <typename H>
  friend H AbslHashValue(H h, const RdsAddr& a) {
    return H::combine(std::move(h), a.bytes, a.scope_id);
  }
};

// An (address, port) pair.
struct RdsEndpoint {
  RdsAddr addr;
  uint16_t port = 0;
  friend bool operator==(const RdsEndpoint& a, const RdsEndpoint& b) = default;
  template <typename H>
  friend H AbslHashValue(H h, const RdsEndpoint& e) {
    return H::combine(std::move(h), e.addr, e.port);
  }
};

// IPv4 predicates used by bind/connect/sendmsg (network-order input).
bool IsV4AnyBroadcastOrMulticast(in_addr a);
// IPv6 "unicast" in the kernel's ipv6_addr_type sense (not :: and not ff00::/8).
bool IsV6Unicast(const in6_addr& a);
bool IsV6Mapped(const in6_addr& a);
bool IsV6LinkLocal(const in6_addr& a);

// The unicast (address, port) in a sockaddr as bind() and sendmsg() accept
// it (rds_bind / rds_sendmsg): AF_INET ≥ 16 bytes and not any, broadcast or
// multicast; AF_INET6 ≥ 28 bytes, unicast or v4-mapped unicast, link-local
// only with a scope id. Anything else → EINVAL.
absl::Status ParseUnicastName(const sockaddr_storage& ss, socklen_t len, RdsEndpoint* out);

// Writes the sockaddr an application sees for (addr, port): sockaddr_in for a
// v4-mapped address, sockaddr_in6 (flowinfo 0, the given scope) otherwise.
// Returns its length (16 or 28). The same form is what the kernel's TCP stack
// takes for the engine's own TCP sockets.
socklen_t ToSockaddr(const RdsAddr& addr, uint16_t port, sockaddr_storage* out);

// The inverse, also for addresses the kernel's TCP stack reports.
RdsEndpoint FromKernelSockaddr(const sockaddr_storage& ss);

}  // namespace rds

#endif  // RDS_ENGINE_ADDR_H_
