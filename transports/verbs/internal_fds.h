// transports/verbs/internal_fds.h — rdma-core's event channels (a CQ's
// completion channel, the RDMA CM's event channel) as the shim's own fds:
// non-blocking, for an epoll loop, and internal (engine/sys.h), so that an
// application's close_range(), closefrom() or dup2() over them is refused as
// it is for every other fd of the shim.
//
// Contract: a completion channel's fd is moved before any CQ names it (the
// kernel looks the channel up by fd only when the CQ is created); rdma-core
// reads the CM channel's fd from the struct at each call. Destroy* forgets the
// fd before rdma-core closes it (the shim's close() would refuse it).
#ifndef RDS_TRANSPORTS_VERBS_INTERNAL_FDS_H_
#define RDS_TRANSPORTS_VERBS_INTERNAL_FDS_H_

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "absl/status/statusor.h"
#include "transports/verbs/verbs_api.h"

namespace rds::verbs {

absl::StatusOr<ibv_comp_channel*> CreateCompChannel(const VerbsApi& api, ibv_context* device);
void DestroyCompChannel(const VerbsApi& api, ibv_comp_channel* channel);

// Also adopts the fds of every device context librdmacm has (it opens them
// all here, once per process).
absl::StatusOr<rdma_event_channel*> CreateEventChannel(const VerbsApi& api);
void DestroyEventChannel(const VerbsApi& api, rdma_event_channel* channel);

}  // namespace rds::verbs

#endif  // RDS_TRANSPORTS_VERBS_INTERNAL_FDS_H_
