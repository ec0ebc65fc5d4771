// engine/rdma.h — a socket's RDMA memory registrations (the kernel's rdma.c):
// RDS_GET_MR, RDS_GET_MR_FOR_DEST and RDS_FREE_MR, the RDMA_DEST cookie a
// sendmsg offers, and what an arriving message's RDMA extension headers do to
// the regions. A region is registered by the transport of the socket's bound
// address (Transport::RegisterMemory: only RDS over RDMA has one), in this
// process, zero-based from its first page as the kernel's are; the cookie is
// rkey | in-page offset << 32 (rds-ib.md §6.1–§6.2). Regions are found by
// rkey, per socket, and go when the socket closes.
//
// Not built yet, refused loudly by sendmsg (EOPNOTSUPP and a log line): the
// initiator's side — RDS_CMSG_RDMA_ARGS, RDS_CMSG_RDMA_MAP, atomics and the
// RDMA_STATUS notifications. Peers (kernel nodes included) can read and write
// a region registered here.
//
// Thread-safety: any thread; the socket's lock guards its regions.
#ifndef RDS_ENGINE_RDMA_H_
#define RDS_ENGINE_RDMA_H_

#include <sys/socket.h>

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/socket.h"
#include "engine/wire.h"

namespace rds {
class MemoryRegion;
}

namespace rds::rdma {

// setsockopt(SOL_RDS, RDS_GET_MR | RDS_GET_MR_FOR_DEST | RDS_FREE_MR).
absl::Status SetMemoryOption(RdsSocket& rs, int name, const void* optval, socklen_t optlen);

// RDS_CMSG_RDMA_DEST on sendmsg: the region `cookie` names among the
// socket's (EINVAL if none). The message holds it until it is freed.
absl::StatusOr<std::shared_ptr<MemoryRegion>> DestRegion(RdsSocket& rs, uint64_t cookie);

// A message with extension headers is queued on `rs`: an RDMA record (a
// peer's RDMA operation used that region) releases the region if it was
// registered USE_ONCE (rds_rdma_unuse).
void OnArrivalLocked(RdsSocket& rs, const wire::ExtHeaders& ext)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(rs.mu);

// Close: the socket's regions are deregistered (rds_rdma_drop_keys).
void DropKeys(RdsSocket& rs);

}  // namespace rds::rdma

#endif  // RDS_ENGINE_RDMA_H_
