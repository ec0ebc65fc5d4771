// preload/sdp_fds.cc — the SDP fd table: a map under one lock (SDP sockets
// are few; the common case, a process without any, never takes the lock),
// published for rdsctl through preload/sdp_status.
#include "preload/sdp_fds.h"

#include <pthread.h>
#include <time.h>

#include <atomic>
#include <mutex>
#include <utility>

#include "absl/base/const_init.h"
#include "absl/container/flat_hash_map.h"
#include "engine/sys.h"
#include "preload/sdp_status.h"

namespace rds::preload::sdp_fds {
namespace {

namespace status = sdp::status;

std::atomic<bool> any{false};
std::atomic<uint64_t> next_id{1};
rds::Mutex mu(absl::kConstInit);
// Never destroyed: calls may come during exit.
absl::flat_hash_map<int, std::shared_ptr<SdpFd>>& Table() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
  static auto* table = new absl::flat_hash_map<int, std::shared_ptr<SdpFd>>();
  return *table;
}
uint64_t beyond ABSL_GUARDED_BY(mu) = 0;  // entries at fds the status table has no slot for

bool Beyond(int fd) { return static_cast<uint32_t>(fd) >= status::kSlots; }

uint64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

// What the slot of `fd` shows for `s`.
status::SlotView ViewOf(int fd, SdpFd& s) {
  status::SlotView v;
  v.family = s.family;
  v.id = s.id;
  v.changed_ns = NowNs();
  rds::MutexLock lock(&s.mu);
  v.state = s.shown.state;
  v.transport = s.shown.transport;
  v.note = s.shown.note;
  bool own_names = !s.verbs.load();
  v.local = s.local;
  v.peer = s.peer;
  if (s.connecting) {
    std::lock_guard<std::mutex> state_lock(s.connecting->mu);
    switch (s.connecting->phase) {
      case sdp::Service::ConnectState::Phase::kPending:
        v.state = status::State::kConnecting;
        break;
      case sdp::Service::ConnectState::Phase::kUp:
        v.state = status::State::kConnected;
        v.local = s.connecting->local;
        if (s.connecting->over_tcp) {
          v.transport = status::Transport::kTcpRelayed;
          v.note = "both: no SDP there";
        }
        break;
      case sdp::Service::ConnectState::Phase::kFailed:
        v.state = status::State::kFailed;
        own_names = true;
        break;
    }
  }
  if (own_names) {  // the kernel socket's own names are the socket's
    socklen_t len = sizeof v.local;
    if (sys::Getsockname(fd, reinterpret_cast<sockaddr*>(&v.local), &len) != 0) v.local = {};
    len = sizeof v.peer;
    if (sys::Getpeername(fd, reinterpret_cast<sockaddr*>(&v.peer), &len) != 0) v.peer = {};
  }
  return v;
}

void ShowLocked(int fd, SdpFd& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
void ClearLocked(int fd) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

// Writes every entry (a table made afresh: a fork child's, or after exec failed).
void ShowAllLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
  for (auto& [fd, s] : Table()) {
    bool fresh = false;
    if (status::Slot* slot = sdp_status::SlotFor(fd, &fresh)) status::Write(*slot, ViewOf(fd, *s));
  }
  sdp_status::SetBeyond(beyond);
}

void ShowLocked(int fd, SdpFd& s) {
  bool fresh = false;
  status::Slot* slot = sdp_status::SlotFor(fd, &fresh);
  if (fresh) {
    ShowAllLocked();
  } else if (slot != nullptr) {
    status::Write(*slot, ViewOf(fd, s));
  }
}

void ClearLocked(int fd) {
  bool fresh = false;
  status::Slot* slot = sdp_status::SlotFor(fd, &fresh);
  if (fresh) {
    ShowAllLocked();
  } else if (slot != nullptr) {
    status::Clear(*slot);
  }
}

// An entry at `fd` is gone (close, dup2 over it).
void EraseLocked(int fd) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
  if (Table().erase(fd) == 0) return;
  if (Beyond(fd)) {
    sdp_status::SetBeyond(--beyond);
  } else {
    ClearLocked(fd);
  }
}

void PutLocked(int fd, std::shared_ptr<SdpFd> s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
  auto [it, added] = Table().insert_or_assign(fd, std::move(s));
  if (Beyond(fd)) {
    if (added) sdp_status::SetBeyond(++beyond);
    return;
  }
  ShowLocked(fd, *it->second);
}

}  // namespace

SdpFd::SdpFd(int family, bool tcp_fallback)
    : family(family), id(next_id.fetch_add(1, std::memory_order_relaxed)),
      tcp_fallback(tcp_fallback) {}

bool Any() { return any.load(std::memory_order_relaxed); }

std::shared_ptr<SdpFd> Find(int fd) {
  if (!Any()) return nullptr;
  rds::MutexLock lock(&mu);
  auto it = Table().find(fd);
  return it == Table().end() ? nullptr : it->second;
}

void Mark(int fd, std::shared_ptr<SdpFd> s) {
  // A fork must not find the table's lock held by a thread the child lacks.
  static std::once_flag once;
  std::call_once(once, [] { pthread_atfork(LockForFork, UnlockAfterFork, UnlockAfterFork); });
  rds::MutexLock lock(&mu);
  PutLocked(fd, std::move(s));
  any.store(true, std::memory_order_relaxed);
}

void Forget(int fd) {
  if (!Any()) return;
  rds::MutexLock lock(&mu);
  EraseLocked(fd);
}

void ForgetRange(unsigned int first, unsigned int last) {
  if (!Any()) return;
  rds::MutexLock lock(&mu);
  std::vector<int> gone;
  for (const auto& [fd, s] : Table()) {
    const auto u = static_cast<unsigned int>(fd);
    if (u >= first && u <= last) gone.push_back(fd);
  }
  for (int fd : gone) EraseLocked(fd);
}

void Duplicate(int from, int to) {
  if (!Any() || from == to) return;
  rds::MutexLock lock(&mu);
  auto it = Table().find(from);
  if (it == Table().end()) {
    EraseLocked(to);
    return;
  }
  std::shared_ptr<SdpFd> shared = it->second;  // (inserting `to` may move the entries)
  PutLocked(to, std::move(shared));
}

void ForEach(absl::FunctionRef<void(int fd, SdpFd& s)> fn) {
  if (!Any()) return;
  rds::MutexLock lock(&mu);
  for (auto& [fd, s] : Table()) fn(fd, *s);
}

void Publish(int fd, const SdpFd* entry) {
  if (!Any()) return;
  rds::MutexLock lock(&mu);
  auto it = Table().find(fd);
  if (it == Table().end() || (entry != nullptr && it->second.get() != entry)) return;
  if (!Beyond(fd)) ShowLocked(fd, *it->second);
}

void Withdraw() {
  if (!Any()) return;
  rds::MutexLock lock(&mu);
  sdp_status::Withdraw();
}

void LockForFork() { mu.Lock(); }
void UnlockAfterFork() { mu.Unlock(); }

}  // namespace rds::preload::sdp_fds
