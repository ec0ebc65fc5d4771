// engine/share_internal.h — what the three parts of socket sharing
// (engine/share.h) use of each other: the client's link to the owner
// (share_client.cc), the owner's server (share_server.cc), and parking
// (share_park.cc). Not for use outside them.
#ifndef RDS_ENGINE_SHARE_INTERNAL_H_
#define RDS_ENGINE_SHARE_INTERNAL_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/socket.h"
#include "engine/sync.h"

namespace rds::share {

// A remote socket's link to its owner (RdsSocket::share_client).
struct Client {
  rds::Mutex mu;  // held for a whole forwarded call (request and reply)
  int conn ABSL_GUARDED_BY(mu) = -1;     // internal fd: a stream to the owner's server
  int backing ABSL_GUARDED_BY(mu) = -1;  // internal fd: a dup of the socket's backing fd
};

namespace internal {

// The owner stops serving socket `id`: the processes it served are
// disconnected (they look for the socket again) and its copy of the backing
// fd is closed. Waits for a call in progress on it.
void StopServing(uint64_t id);

// After this process claimed ownership of `rs` (engine/registry.h): takes the
// parked state queued on the backing fd `fd` into `rs` — options, queue,
// binding — and keeps readiness on the fd for the other holders. Without a
// parked state (its owner was killed) the socket stays as it is: fresh and
// unbound (logged).
void TakeParkedState(const std::shared_ptr<RdsSocket>& rs, int fd);

}  // namespace internal
}  // namespace rds::share

#endif  // RDS_ENGINE_SHARE_INTERNAL_H_
