// engine/share_internal.h — what the three parts of socket sharing
// (engine/share.h) use of each other: the client's link to the owner
// (share_client.cc), the owner's server (share_server.cc), and parking
// (share_park.cc). Not for use outside them.
#ifndef RDS_ENGINE_SHARE_INTERNAL_H_
#define RDS_ENGINE_SHARE_INTERNAL_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "engine/addr.h"
#include "engine/socket.h"
#include "engine/sync.h"

namespace rds::share {

// A remote socket's link to its owner (RdsSocket::share_client).
struct Client {
  rds::Mutex mu;  // held for a whole forwarded call (request and reply)
  int conn ABSL_GUARDED_BY(mu) = -1;     // internal fd: a stream to the owner's server
  int backing ABSL_GUARDED_BY(mu) = -1;  // internal fd: a dup of the socket's backing fd
  // What the owner said when it took this process on: the socket's binding
  // and a descriptor of the open-file lock that holds its port (-1 if none).
  // Should the owner die without handing the socket on, the binding lives on.
  std::optional<RdsEndpoint> bound ABSL_GUARDED_BY(mu);
  int port_fd ABSL_GUARDED_BY(mu) = -1;
  bool detached ABSL_GUARDED_BY(mu) = false;  // its last descriptor here was closed
};

namespace internal {

// The owner stops serving socket `id`: the processes it served are
// disconnected (they look for the socket again) and its copy of the backing
// fd is closed. Waits for a call in progress on it.
void StopServing(uint64_t id);

// Keeps `fd` (an internal fd of the socket's backing file, taken) as the
// owner's copy, rs.shared_fd, unless it has one already (then `fd` is
// closed). True if it was taken.
bool KeepSharedFd(RdsSocket& rs, int fd);

// A bound socket other processes hold keeps its port with an open-file lock
// (PortRegistry::ParkPort) that each holder gets a descriptor of, so that the
// port outlives any one of them, its owner included. Moves the port there
// once; returns that internal fd (rs.port_fd), or -1 if unbound.
int SharePort(RdsSocket& rs);

// After this process claimed ownership of `rs` (engine/registry.h): takes the
// parked state queued on the backing fd `fd` into `rs` — options, queue,
// binding — and keeps readiness on the fd for the other holders. Without a
// parked state (its owner was killed) the socket keeps only its binding,
// `known_bound` held by the lock `known_port_fd` (taken), if this process
// knew them, else it is fresh and unbound (logged).
void TakeParkedState(const std::shared_ptr<RdsSocket>& rs, int fd,
                     const std::optional<RdsEndpoint>& known_bound = std::nullopt,
                     int known_port_fd = -1);

}  // namespace internal
}  // namespace rds::share

#endif  // RDS_ENGINE_SHARE_INTERNAL_H_
