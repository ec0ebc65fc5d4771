// engine/bind.h — the bind table (kernel bind.c) and bind(2).
//
// The process's bound sockets, keyed by (network namespace, address, port):
// delivery looks sockets up here. Across processes, ports are taken in the
// host registry (engine/registry.h), so EADDRINUSE holds host-wide.
//
// Thread-safety: safe for concurrent use.
#ifndef RDS_ENGINE_BIND_H_
#define RDS_ENGINE_BIND_H_

#include <sys/socket.h>

#include <memory>

#include "absl/status/status.h"
#include "engine/addr.h"
#include "engine/registry.h"

namespace rds {

class RdsSocket;

// bind(2) on an RDS socket (kernel-rds.md §A.2).
absl::Status Bind(RdsSocket& rs, const sockaddr* uaddr, socklen_t len);

// Removes the socket's binding, if any (close, §A.10).
void Unbind(RdsSocket& rs);

// Socket sharing (engine/share.h). A parked socket leaves this process's
// table without giving up its port (its lock went with it, and the port's
// generation stays: it is the same binding).
void UnbindParked(RdsSocket& rs);
// A socket taken over with its binding (`rs.bound` set): enters the table,
// its port held by the shared open-file lock `parked_port_fd` (kept as
// rs.port_fd), or taken afresh if -1. The port's generation stays.
absl::Status BindTakenOver(RdsSocket& rs, int parked_port_fd);

// The bound socket of this process at (ns, addr, port), or null.
std::shared_ptr<RdsSocket> FindBound(NetNsKey ns, const RdsEndpoint& local);

// Changes whenever the bind table does (a bind or an unbind, any namespace):
// a FindBound answer looked up after reading an epoch holds while the epoch
// reads the same.
uint64_t BindTableEpoch();

// True if this process has (ns, addr, port) bound.
bool IsBoundHere(NetNsKey ns, const RdsEndpoint& local);

// Forgets every binding (fork child: the parent keeps them).
void ResetBindTableAfterFork();

}  // namespace rds

#endif  // RDS_ENGINE_BIND_H_
