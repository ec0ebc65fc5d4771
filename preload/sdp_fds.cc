// preload/sdp_fds.cc — the SDP fd table: a map under one lock (SDP sockets
// are few; the common case, a process without any, never takes the lock).
#include "preload/sdp_fds.h"

#include <atomic>
#include <utility>

#include "absl/base/const_init.h"
#include "absl/container/flat_hash_map.h"

namespace rds::preload::sdp_fds {
namespace {

std::atomic<bool> any{false};
rds::Mutex mu(absl::kConstInit);
// Never destroyed: calls may come during exit.
absl::flat_hash_map<int, std::shared_ptr<SdpFd>>& Table() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
  static auto* table = new absl::flat_hash_map<int, std::shared_ptr<SdpFd>>();
  return *table;
}

}  // namespace

bool Any() { return any.load(std::memory_order_relaxed); }

std::shared_ptr<SdpFd> Find(int fd) {
  if (!Any()) return nullptr;
  rds::MutexLock lock(&mu);
  auto it = Table().find(fd);
  return it == Table().end() ? nullptr : it->second;
}

void Mark(int fd, std::shared_ptr<SdpFd> s) {
  rds::MutexLock lock(&mu);
  Table()[fd] = std::move(s);
  any.store(true, std::memory_order_relaxed);
}

void Forget(int fd) {
  if (!Any()) return;
  rds::MutexLock lock(&mu);
  Table().erase(fd);
}

void ForgetRange(unsigned int first, unsigned int last) {
  if (!Any()) return;
  rds::MutexLock lock(&mu);
  auto& t = Table();
  for (auto it = t.begin(); it != t.end();) {
    const auto fd = static_cast<unsigned int>(it->first);
    if (fd >= first && fd <= last) {
      t.erase(it++);
    } else {
      ++it;
    }
  }
}

void Duplicate(int from, int to) {
  if (!Any() || from == to) return;
  rds::MutexLock lock(&mu);
  auto& t = Table();
  auto it = t.find(from);
  if (it == t.end()) {
    t.erase(to);
    return;
  }
  std::shared_ptr<SdpFd> shared = it->second;  // (inserting `to` may move the entries)
  t[to] = std::move(shared);
}

void LockForFork() { mu.Lock(); }
void UnlockAfterFork() { mu.Unlock(); }

}  // namespace rds::preload::sdp_fds
