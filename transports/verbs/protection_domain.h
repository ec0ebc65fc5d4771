// transports/verbs/protection_domain.h — one protection domain per RDMA
// device context of the process, shared by every queue pair and memory region
// on that device (the kernel's one PD per rds_ib_device). A peer's RDMA
// operation names a region by its rkey and arrives on one of our queue pairs:
// the two must be in one domain, whichever connection the region was
// registered for.
//
// Thread-safety: any thread.
#ifndef RDS_TRANSPORTS_VERBS_PROTECTION_DOMAIN_H_
#define RDS_TRANSPORTS_VERBS_PROTECTION_DOMAIN_H_

#include <memory>

#include "absl/status/statusor.h"
#include "transports/verbs/verbs_api.h"

namespace rds::verbs {

// A holder of the domain; the domain is freed with its last holder.
using SharedPd = std::shared_ptr<ibv_pd>;

// The domain of `context`, allocated at first use.
absl::StatusOr<SharedPd> ProtectionDomainFor(const VerbsApi& api, ibv_context* context);

}  // namespace rds::verbs

#endif  // RDS_TRANSPORTS_VERBS_PROTECTION_DOMAIN_H_
