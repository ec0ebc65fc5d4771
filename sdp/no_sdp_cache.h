// sdp/no_sdp_cache.h — destinations known to serve no SDP, for a while: under
// libsdp's "both" a connect that found no SDP listener (or no answer within
// its short deadline) goes on over TCP, and the next connects to the same
// destination go to TCP at once until the answer is old (sdp.md §4.3).
//
// Keys are the caller's (an address and port); the table is bounded (the
// oldest entry makes room). Pure: the caller gives the time.
//
// Thread-safety: none; the caller locks.
#ifndef RDS_SDP_NO_SDP_CACHE_H_
#define RDS_SDP_NO_SDP_CACHE_H_

#include <cstddef>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"

namespace rds::sdp {

class NoSdpCache {
 public:
  NoSdpCache(absl::Duration ttl, size_t capacity) : ttl_(ttl), capacity_(capacity) {}

  // `key` served no SDP at `now`.
  void Remember(const std::string& key, absl::Time now);
  // `key` served SDP after all (a connect succeeded).
  void Forget(const std::string& key) { when_.erase(key); }
  // Whether `key` is known, at `now`, to serve no SDP.
  bool Known(const std::string& key, absl::Time now);
  size_t size() const { return when_.size(); }

 private:
  const absl::Duration ttl_;
  const size_t capacity_;
  absl::flat_hash_map<std::string, absl::Time> when_;
};

}  // namespace rds::sdp

#endif  // RDS_SDP_NO_SDP_CACHE_H_
