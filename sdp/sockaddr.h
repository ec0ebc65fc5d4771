// sdp/sockaddr.h — SDP's address families in the addresses a program passes.
//
// OFED's SDP accepted sockaddr_in / sockaddr_in6 whose family was 27 / 28 as
// well as AF_INET / AF_INET6 (sdp.md §1.7); an SDP socket of the shim is a
// kernel AF_INET / AF_INET6 socket, which refuses 27 / 28. Addresses going in
// are rewritten; nothing going out ever carries 27 / 28 (the kernel reports
// AF_INET / AF_INET6, as OFED and libsdp did).
//
// Pure functions: no state, safe anywhere.
#ifndef RDS_SDP_SOCKADDR_H_
#define RDS_SDP_SOCKADDR_H_

#include <sys/socket.h>

namespace rds::sdp {

// True if the first two bytes of an address (its family) are 27 or 28:
// `addr` then needs rewriting before the kernel sees it.
bool HasSdpFamily(sa_family_t family);

// Rewrites the family of `addr` (a copy, `len` bytes) from 27 / 28 to
// AF_INET / AF_INET6. Other families are left alone.
void ToKernelFamily(sockaddr_storage* addr);

}  // namespace rds::sdp

#endif  // RDS_SDP_SOCKADDR_H_
