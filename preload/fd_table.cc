// preload/fd_table.cc — the fd table and adoption of arriving RDS fds.
#include "preload/fd_table.h"

#include <fcntl.h>
#include <pthread.h>

#include <atomic>
#include <cstdint>

#include "engine/abandon.h"
#include "engine/sync.h"
#include "engine/log.h"
#include "engine/netns.h"
#include "engine/readiness.h"
#include "engine/registry.h"
#include "engine/share.h"
#include "engine/sys.h"

namespace rds::preload {
namespace {

constexpr int kChunkBits = 10;
constexpr int kChunkSize = 1 << kChunkBits;
constexpr int kChunks = 1 << 12;  // fds up to 4M

struct Slot {
  std::atomic<bool> present{false};
  std::atomic<std::shared_ptr<const FdEntry>> entry;
};

struct Chunk {
  Slot slots[kChunkSize];
};

std::atomic<Chunk*> chunks[kChunks];
std::atomic<bool> any_rds{false};
rds::Mutex write_mu(absl::kConstInit);
// Changes with every write to the table: a thread's cached entry is current
// while the generation it was read under is.
std::atomic<uint64_t> table_gen{1};

// The entry this thread's last call used (CallEntry). Trivially
// destructible: the reference is dropped by a pthread key destructor when
// the thread exits (a thread_local destructor could run after the
// library's other state is gone at process exit).
struct CallCache {
  int fd;
  uint64_t gen;
  int depth;  // wrapped calls in progress on this thread (signal handlers nest)
  std::shared_ptr<const FdEntry>* held;
};
constinit thread_local CallCache t_call{-1, 0, 0, nullptr};
pthread_key_t call_key;
pthread_once_t call_key_once = PTHREAD_ONCE_INIT;

Slot* SlotFor(int fd, bool create) {
  if (fd < 0 || fd >= kChunks * kChunkSize) return nullptr;
  std::atomic<Chunk*>& c = chunks[fd >> kChunkBits];
  Chunk* chunk = c.load(std::memory_order_acquire);
  if (chunk == nullptr) {
    if (!create) return nullptr;
    chunk = new Chunk();  // never freed: readers may hold pointers into it
    c.store(chunk, std::memory_order_release);
  }
  return &chunk->slots[fd & (kChunkSize - 1)];
}

void Store(int fd, std::shared_ptr<const FdEntry> e) {
  rds::MutexLock lock(&write_mu);
  Slot* s = SlotFor(fd, true);
  if (s == nullptr) return;
  any_rds.store(true, std::memory_order_release);
  s->entry.store(std::move(e));
  s->present.store(true, std::memory_order_release);
  table_gen.fetch_add(1, std::memory_order_release);
}

}  // namespace

bool AnyRds() { return any_rds.load(std::memory_order_relaxed); }

bool MaybeRds(int fd) {
  if (!any_rds.load(std::memory_order_relaxed)) return false;
  Slot* s = SlotFor(fd, false);
  return s != nullptr && s->present.load(std::memory_order_acquire);
}

std::shared_ptr<const FdEntry> Lookup(int fd) {
  if (!MaybeRds(fd)) return nullptr;
  Slot* s = SlotFor(fd, false);
  std::shared_ptr<const FdEntry> e = s->entry.load();
  if (e && e->state == FdEntry::State::kPending) {
    AdoptIfRds(fd);
    e = s->entry.load();
  }
  return e;
}

void Publish(int fd, std::shared_ptr<RdsSocket> socket) {
  socket->fd_refs.fetch_add(1);
  Store(fd, std::make_shared<FdEntry>(FdEntry{FdEntry::State::kOwned, std::move(socket)}));
}

void PublishOrphan(int fd) {
  Store(fd, std::make_shared<FdEntry>(FdEntry{FdEntry::State::kOrphaned, nullptr}));
}

void PublishPending(int fd) {
  Store(fd, std::make_shared<FdEntry>(FdEntry{FdEntry::State::kPending, nullptr}));
}

std::shared_ptr<const FdEntry> Unpublish(int fd) {
  rds::MutexLock lock(&write_mu);
  Slot* s = SlotFor(fd, false);
  if (s == nullptr || !s->present.load()) return nullptr;
  s->present.store(false, std::memory_order_release);
  std::shared_ptr<const FdEntry> e = s->entry.exchange(nullptr);
  table_gen.fetch_add(1, std::memory_order_release);
  return e;
}

CallEntry LookupForCall(int fd) {
  CallEntry out;
  if (!MaybeRds(fd)) return out;
  CallCache& c = t_call;
  // Counted before the cache is touched, so that a signal handler's call
  // in the middle of this one leaves the cache alone.
  ++c.depth;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  if (c.depth == 1) {
    const uint64_t gen = table_gen.load(std::memory_order_acquire);
    if (c.held == nullptr || c.fd != fd || c.gen != gen) {
      if (c.held == nullptr) {
        pthread_once(&call_key_once, [] {
          pthread_key_create(&call_key, [](void* held) {
            delete static_cast<std::shared_ptr<const FdEntry>*>(held);
            t_call.held = nullptr;
          });
        });
        c.held = new std::shared_ptr<const FdEntry>();
        pthread_setspecific(call_key, c.held);
      }
      // Read after the generation: a write between the two makes the next
      // call read again.
      *c.held = Lookup(fd);
      const bool cacheable = *c.held && (*c.held)->state != FdEntry::State::kPending;
      c.fd = cacheable ? fd : -1;
      c.gen = gen;
    }
    out.entry_ = c.held->get();
    out.borrowed_ = out.entry_ != nullptr;
  } else {
    out.owned_ = Lookup(fd);
    out.entry_ = out.owned_.get();
  }
  if (!out.borrowed_) {
    std::atomic_signal_fence(std::memory_order_seq_cst);
    --c.depth;
  }
  return out;
}

CallEntry::~CallEntry() {
  if (!borrowed_) return;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  --t_call.depth;
}

void ForgetLostAfterLostFds() {
  table_gen.fetch_add(1, std::memory_order_release);
  auto orphan = std::make_shared<FdEntry>(FdEntry{FdEntry::State::kOrphaned, nullptr});
  for (int c = 0; c < kChunks; ++c) {
    Chunk* chunk = chunks[c].load();
    if (chunk == nullptr) continue;
    for (int i = 0; i < kChunkSize; ++i) {
      Slot& s = chunk->slots[i];
      if (!s.present.load()) continue;
      const int fd = c * kChunkSize + i;
      std::shared_ptr<const FdEntry> old = s.entry.load();
      std::optional<uint64_t> id = RecognizeBackingFd(fd);
      const bool same = id && old &&
                        (old->state != FdEntry::State::kOwned || old->socket->id == *id);
      if (!same) {
        // Closed too, or the number is another file now: not an RDS fd.
        s.present.store(false, std::memory_order_release);
        s.entry.store(nullptr);
      } else if (old->state == FdEntry::State::kOwned) {
        s.entry.store(orphan);
      }
      // The socket objects are leaked, as after fork: the abandoned
      // engine's threads may still hold their locks.
      if (old && old->state == FdEntry::State::kOwned) {
        Abandon(new std::shared_ptr<const FdEntry>(std::move(old)));
      }
    }
  }
}

void LockTableForFork() { write_mu.Lock(); }
void UnlockTableAfterFork() { write_mu.Unlock(); }

void ReexamineAllAfterFork() {
  table_gen.fetch_add(1, std::memory_order_release);
  auto pending = std::make_shared<FdEntry>(FdEntry{FdEntry::State::kPending, nullptr});
  for (auto& c : chunks) {
    Chunk* chunk = c.load();
    if (chunk == nullptr) continue;
    for (Slot& s : chunk->slots) {
      if (!s.present.load()) continue;
      std::shared_ptr<const FdEntry> old = s.entry.load();
      if (!old || old->state != FdEntry::State::kOwned) continue;
      s.entry.store(pending);
      // The parent's socket objects are leaked in the child: their locks may
      // be held by threads that do not exist here.
      Abandon(new std::shared_ptr<const FdEntry>(std::move(old)));
    }
  }
}

std::vector<std::pair<int, std::shared_ptr<RdsSocket>>> OwnedFds() {
  std::vector<std::pair<int, std::shared_ptr<RdsSocket>>> out;
  if (!AnyRds()) return out;
  rds::MutexLock lock(&write_mu);
  for (int c = 0; c < kChunks; ++c) {
    Chunk* chunk = chunks[c].load();
    if (chunk == nullptr) continue;
    for (int i = 0; i < kChunkSize; ++i) {
      Slot& s = chunk->slots[i];
      if (!s.present.load()) continue;
      std::shared_ptr<const FdEntry> e = s.entry.load();
      if (e && e->state == FdEntry::State::kOwned) out.emplace_back(c * kChunkSize + i, e->socket);
    }
  }
  return out;
}

void ReexamineReleased() {
  rds::MutexLock lock(&write_mu);
  auto pending = std::make_shared<FdEntry>(FdEntry{FdEntry::State::kPending, nullptr});
  for (auto& c : chunks) {
    Chunk* chunk = c.load();
    if (chunk == nullptr) continue;
    for (Slot& s : chunk->slots) {
      if (!s.present.load()) continue;
      std::shared_ptr<const FdEntry> old = s.entry.load();
      if (!old || old->state != FdEntry::State::kOwned) continue;
      bool released;
      {
        rds::MutexLock slock(&old->socket->mu);
        released = old->socket->released;
      }
      if (released) s.entry.store(pending);
    }
  }
  table_gen.fetch_add(1, std::memory_order_release);
}

void AdoptIfRds(int fd) {
  std::optional<uint64_t> id = RecognizeBackingFd(fd);
  if (!id) {
    Unpublish(fd);
    return;
  }
  absl::StatusOr<std::shared_ptr<RdsSocket>> rs = share::AttachReceived(*id, fd);
  if (!rs.ok()) {
    log::Warn("fd %d: cannot use RDS socket %016x: %s", fd, *id, rs.status().ToString());
    PublishOrphan(fd);
    return;
  }
  Publish(fd, std::move(*rs));
}

}  // namespace rds::preload
