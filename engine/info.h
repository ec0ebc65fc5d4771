// engine/info.h — getsockopt(SOL_RDS, RDS_INFO_*) (kernel info.c), answered
// host-wide.
//
// Kernel RDS answers RDS_INFO from one kernel for the whole network
// namespace; here every shim process holds part of the picture. The asking
// process produces its own items, asks every other engine in its namespace
// for theirs over the engines' Unix sockets (hello kind kInfo), and merges
// them: counters are summed by name, tables are concatenated. The caller's
// buffer length is negotiated as the kernel does (kernel-rds.md §A.8): ENOSPC
// with the needed length when short, otherwise the item size as the return
// value and the total length in *optlen.
//
// Thread-safety: safe for concurrent use.
#ifndef RDS_ENGINE_INFO_H_
#define RDS_ENGINE_INFO_H_

#include <sys/socket.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace rds {

class NetNs;
class RdsSocket;

// Items of one size, laid out as the uapi structs.
struct InfoItems {
  size_t each = 0;
  std::vector<uint8_t> bytes;
};

// This process's items for RDS_INFO option `option` in namespace `ns`.
// ENOPROTOOPT for options the kernel does not register with rds_tcp.
absl::StatusOr<InfoItems> LocalInfoItems(int option, const std::shared_ptr<NetNs>& ns);

// Everything this engine knows, as one JSON object (for rdsctl): process,
// sockets, paths, counters, configuration. Asked for with a kInfo hello whose
// option is 0.
std::string EngineDumpJson();

// getsockopt(SOL_RDS, RDS_INFO_*) on `rs`: the whole namespace's answer.
absl::StatusOr<int> InfoGetSockOpt(RdsSocket& rs, int option, void* optval, socklen_t* optlen);

}  // namespace rds

#endif  // RDS_ENGINE_INFO_H_
