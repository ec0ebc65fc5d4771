// sdp/no_sdp_cache.cc — see no_sdp_cache.h.
#include "sdp/no_sdp_cache.h"

namespace rds::sdp {

void NoSdpCache::Remember(const std::string& key, absl::Time now) {
  if (!when_.contains(key) && when_.size() >= capacity_) {
    // Full: the expired go, else the oldest.
    absl::erase_if(when_, [&](const auto& kv) { return now - kv.second >= ttl_; });
    if (when_.size() >= capacity_) {
      auto oldest = when_.begin();
      for (auto it = when_.begin(); it != when_.end(); ++it) {
        if (it->second < oldest->second) oldest = it;
      }
      when_.erase(oldest);
    }
  }
  when_[key] = now;
}

bool NoSdpCache::Known(const std::string& key, absl::Time now) {
  auto it = when_.find(key);
  if (it == when_.end()) return false;
  if (now - it->second >= ttl_) {
    when_.erase(it);
    return false;
  }
  return true;
}

}  // namespace rds::sdp
