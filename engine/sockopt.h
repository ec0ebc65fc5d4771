// engine/sockopt.h — setsockopt(2)/getsockopt(2) on an RDS socket
// (kernel af_rds.c rds_setsockopt/rds_getsockopt, kernel-rds.md §A.7).
//
// SOL_SOCKET options that are not family specific are applied to the fd that
// backs the RDS socket, so the kernel's generic socket layer answers them
// with its own rules (sizes, doubling and caps of SO_SNDBUF, timeouts,
// validation). The RDS layer keeps a copy of what it needs (buffer sizes,
// timeouts, timestamp requests).
//
// Thread-safety: safe for concurrent use.
#ifndef RDS_ENGINE_SOCKOPT_H_
#define RDS_ENGINE_SOCKOPT_H_

#include <sys/socket.h>

#include "absl/status/statusor.h"

namespace rds {

class RdsSocket;

// Application pointers are passed through untouched; they are read and
// written with EFAULT semantics.
absl::Status SetSockOpt(RdsSocket& rs, int fd, int level, int name, const void* optval,
                        socklen_t optlen);
// Returns the call's return value (0, or the item size for RDS_INFO_*).
absl::StatusOr<int> GetSockOpt(RdsSocket& rs, int fd, int level, int name, void* optval,
                               socklen_t* optlen);

}  // namespace rds

#endif  // RDS_ENGINE_SOCKOPT_H_
