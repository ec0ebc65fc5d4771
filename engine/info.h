// engine/info.h — getsockopt(SOL_RDS, RDS_INFO_*) (kernel info.c).
//
// Producers report items of a fixed size; the caller's buffer length is
// negotiated as the kernel does (kernel-rds.md §A.8): ENOSPC with the needed
// length when short, otherwise the item size as the return value and the
// total length in *optlen. Answers cover this process's engine (host-wide
// answers are issue 5's).
//
// Thread-safety: safe for concurrent use.
#ifndef RDS_ENGINE_INFO_H_
#define RDS_ENGINE_INFO_H_

#include <sys/socket.h>

#include "absl/status/statusor.h"

namespace rds {

class RdsSocket;

absl::StatusOr<int> InfoGetSockOpt(RdsSocket& rs, int name, void* optval, socklen_t* optlen);

}  // namespace rds

#endif  // RDS_ENGINE_INFO_H_
