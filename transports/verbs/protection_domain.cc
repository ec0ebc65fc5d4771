// transports/verbs/protection_domain.h: one domain per device context.
#include "transports/verbs/protection_domain.h"

#include <cerrno>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "engine/sync.h"

namespace rds::verbs {

absl::StatusOr<SharedPd> ProtectionDomainFor(const VerbsApi& api, ibv_context* context) {
  static rds::Mutex mu;
  static auto* domains = new absl::flat_hash_map<ibv_context*, std::weak_ptr<ibv_pd>>();
  rds::MutexLock lock(&mu);
  std::weak_ptr<ibv_pd>& slot = (*domains)[context];
  if (SharedPd pd = slot.lock()) return pd;
  ibv_pd* raw = api.ibv.alloc_pd(context);
  if (raw == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("ibv_alloc_pd: ", strerror(errno)));
  }
  const VerbsApi* a = &api;
  SharedPd pd(raw, [a](ibv_pd* p) { a->ibv.dealloc_pd(p); });
  slot = pd;
  return pd;
}

}  // namespace rds::verbs
