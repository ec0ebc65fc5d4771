// engine/addr.cc — RdsAddr conversions and predicates.
#include "engine/addr.h"

#include <arpa/inet.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/errors.h"

namespace rds {

RdsAddr RdsAddr::FromV4(in_addr v4) {
  RdsAddr a;
  a.bytes[10] = 0xff;
  a.bytes[11] = 0xff;
  std::memcpy(&a.bytes[12], &v4.s_addr, 4);
  return a;
}

RdsAddr RdsAddr::FromV6(const in6_addr& v6, uint32_t scope_id) {
  RdsAddr a;
  std::memcpy(a.bytes.data(), v6.s6_addr, 16);
  a.scope_id = IsV6LinkLocal(v6) ? scope_id : 0;
  return a;
}

bool RdsAddr::IsV4Mapped() const { return IsV6Mapped(V6()); }

bool RdsAddr::IsAny() const {
  if (IsV4Mapped()) return V4().s_addr == htonl(INADDR_ANY);
  for (uint8_t b : bytes) {
    if (b != 0) return false;
  }
  return true;
}

bool RdsAddr::IsLinkLocal() const { return IsV6LinkLocal(V6()); }

in_addr RdsAddr::V4() const {
  in_addr v4;
  std::memcpy(&v4.s_addr, &bytes[12], 4);
  return v4;
}

in6_addr RdsAddr::V6() const {
  in6_addr v6;
  std::memcpy(v6.s6_addr, bytes.data(), 16);
  return v6;
}

std::string RdsAddr::ToString() const {
  char buf[INET6_ADDRSTRLEN];
  if (IsV4Mapped()) {
    in_addr v4 = V4();
    inet_ntop(AF_INET, &v4, buf, sizeof(buf));
    return buf;
  }
  in6_addr v6 = V6();
  inet_ntop(AF_INET6, &v6, buf, sizeof(buf));
  if (scope_id != 0) return absl::StrCat(buf, "%", scope_id);
  return buf;
}

bool IsV4AnyBroadcastOrMulticast(in_addr a) {
  uint32_t h = ntohl(a.s_addr);
  return h == INADDR_ANY || h == INADDR_BROADCAST || IN_MULTICAST(h);
}

bool IsV6Unicast(const in6_addr& a) {
  if (a.s6_addr[0] == 0xff) return false;  // multicast
  return !IN6_IS_ADDR_UNSPECIFIED(&a);
}

bool IsV6Mapped(const in6_addr& a) { return IN6_IS_ADDR_V4MAPPED(&a); }

bool IsV6LinkLocal(const in6_addr& a) { return IN6_IS_ADDR_LINKLOCAL(&a); }

absl::Status ParseUnicastName(const sockaddr_storage& ss, socklen_t len, RdsEndpoint* out) {
  if (ss.ss_family == AF_INET) {
    if (len < sizeof(sockaddr_in)) return RdsError(EINVAL);
    const auto* sin = reinterpret_cast<const sockaddr_in*>(&ss);
    if (IsV4AnyBroadcastOrMulticast(sin->sin_addr)) return RdsError(EINVAL);
    *out = {RdsAddr::FromV4(sin->sin_addr), ntohs(sin->sin_port)};
    return absl::OkStatus();
  }
  if (ss.ss_family == AF_INET6) {
    if (len < sizeof(sockaddr_in6)) return RdsError(EINVAL);
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
    *out = {RdsAddr::FromV6(a, sin6->sin6_scope_id), ntohs(sin6->sin6_port)};
    return absl::OkStatus();
  }
  return RdsError(EINVAL);
}

socklen_t ToSockaddr(const RdsAddr& addr, uint16_t port, sockaddr_storage* out) {
  std::memset(out, 0, sizeof(*out));
  if (addr.IsV4Mapped()) {
    auto* sin = reinterpret_cast<sockaddr_in*>(out);
    sin->sin_family = AF_INET;
    sin->sin_port = htons(port);
    sin->sin_addr = addr.V4();
    return sizeof(sockaddr_in);
  }
  auto* sin6 = reinterpret_cast<sockaddr_in6*>(out);
  sin6->sin6_family = AF_INET6;
  sin6->sin6_port = htons(port);
  sin6->sin6_addr = addr.V6();
  sin6->sin6_scope_id = addr.scope_id;
  return sizeof(sockaddr_in6);
}

RdsEndpoint FromKernelSockaddr(const sockaddr_storage& ss) {
  RdsEndpoint e;
  if (ss.ss_family == AF_INET) {
    const auto* sin = reinterpret_cast<const sockaddr_in*>(&ss);
    e.addr = RdsAddr::FromV4(sin->sin_addr);
    e.port = ntohs(sin->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(&ss);
    e.addr = RdsAddr::FromV6(sin6->sin6_addr, sin6->sin6_scope_id);
    e.port = ntohs(sin6->sin6_port);
  }
  return e;
}

}  // namespace rds
