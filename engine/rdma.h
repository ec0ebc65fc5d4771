// engine/rdma.h — a socket's RDMA memory registrations (the kernel's rdma.c):
// RDS_GET_MR, RDS_GET_MR_FOR_DEST and RDS_FREE_MR, the RDMA_DEST cookie a
// sendmsg offers, and what an arriving message's RDMA extension headers do to
// the regions. A region is registered by the transport of the socket's bound
// address (Transport::RegisterMemory: only RDS over RDMA has one), in this
// process, zero-based from its first page as the kernel's are; the cookie is
// rkey | in-page offset << 32 (rds-ib.md §6.1–§6.2). Regions are found by
// rkey, per socket, and go when the socket closes.
//
// The initiator's side: RDS_CMSG_RDMA_ARGS makes an RdmaOp that rides on its
// message to the RDMA link, which posts the RDMA WRITE or READ before the
// message's SENDs (rds-ib.md §6.4) and finishes the op with its completion;
// RDS_CMSG_RDMA_STATUS notifications are queued on the socket. RDMA_MAP is
// GET_MR plus RDMA_DEST. Not built (EOPNOTSUPP and a warning): atomics.
//
// Thread-safety: any thread; the socket's lock guards its regions.
#ifndef RDS_ENGINE_RDMA_H_
#define RDS_ENGINE_RDMA_H_

#include <sys/socket.h>

#include <linux/rds.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/socket.h"
#include "engine/wire.h"

namespace rds {
class MemoryRegion;

// One RDMA operation of a message (the kernel's rm_rdma_op), made by sendmsg
// and done by the link that carries the message (any thread: the engine
// thread, or a sender's on the inline path).
struct RdmaOp {
  bool write = false;   // RDMA WRITE (local to remote); else READ
  bool fence = false;   // the message's SENDs wait for it (IBV_SEND_FENCE)
  bool notify = false;  // NOTIFY_ME
  bool recverr = false; // RDS_RECVERR on the socket: failures are notified anyway
  uint64_t token = 0;   // user_token
  uint32_t rkey = 0;
  uint64_t remote_addr = 0;  // the cookie's offset plus remote_vec.addr
  struct Segment {
    uint64_t addr;
    uint32_t len;
    uint32_t lkey;
  };
  std::vector<Segment> local;  // one work request each, at consecutive remote addresses
  std::vector<std::shared_ptr<MemoryRegion>> regions;  // the local segments' registrations
  std::weak_ptr<RdsSocket> socket;
  std::atomic<bool> finished{false};

  // The op ended with `status` (RDS_RDMA_SUCCESS, _REMOTE_ERROR, _CANCELED,
  // _DROPPED, _OTHER_ERROR): an RDS_CMSG_RDMA_STATUS notification is queued if
  // asked for (or on failure with RDS_RECVERR). Only the first call counts.
  void Finish(int status);
};
}

namespace rds::rdma {

// setsockopt(SOL_RDS, RDS_GET_MR | RDS_GET_MR_FOR_DEST | RDS_FREE_MR).
absl::Status SetMemoryOption(RdsSocket& rs, int name, const void* optval, socklen_t optlen);

// RDS_CMSG_RDMA_ARGS on sendmsg from a socket bound to `laddr` over RDMA:
// the operation, its local segments registered (rds_cmsg_rdma_args' checks:
// EINVAL when the local bytes exceed the remote ones; EFAULT for memory that
// cannot be registered).
absl::StatusOr<std::shared_ptr<RdmaOp>> MakeOp(RdsSocket& rs, const rds_rdma_args& args);

// RDS_CMSG_RDMA_MAP: RDS_GET_MR now; the cookie to offer (RDMA_DEST).
absl::StatusOr<uint64_t> MapForMessage(RdsSocket& rs, const rds_get_mr_args& args);

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
