// engine/shm_arena.cc — the shared-memory payload arena.
#include "engine/shm_arena.h"
#include "engine/abandon.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"
#include "conf/settings.h"
#include "engine/log.h"
#include "engine/sys.h"

namespace rds {
namespace {

// The process's arena: created once (per process image: a fork child starts
// over), never destroyed (payloads and peers may refer to it until exit).
std::shared_ptr<ShmArena>* process_arena = nullptr;  // guarded by ShmArenaMutex()
bool arena_tried = false;                             // guarded by ShmArenaMutex()

}  // namespace

rds::Mutex& ShmArenaMutex() {
  static rds::Mutex mu(absl::kConstInit);
  return mu;
}

std::shared_ptr<ShmArena> ShmArena::Get() {
  rds::MutexLock lock(&ShmArenaMutex());
  if (!arena_tried) {
    arena_tried = true;
    const int64_t mb = conf::Get().shm_arena_mb;
    if (mb > 0) {
      absl::StatusOr<std::shared_ptr<ShmArena>> a = Create(static_cast<size_t>(mb) << 20);
      if (a.ok()) {
        process_arena = new std::shared_ptr<ShmArena>(std::move(*a));
      } else {
        log::Warn("no shared-memory arena (%s): large payloads to same-host engines are copied "
                  "through the link",
                  a.status().message());
      }
    }
  }
  return process_arena ? *process_arena : nullptr;
}

std::shared_ptr<ShmArena> ShmArena::Existing() {
  rds::MutexLock lock(&ShmArenaMutex());
  return process_arena ? *process_arena : nullptr;
}

void ShmArena::ResetAfterFork() {
  // The parent's arena object is abandoned (its fd was closed with the other
  // internal fds); the child makes its own on first use.
  Abandon(process_arena);
  process_arena = nullptr;
  arena_tried = false;
}

absl::StatusOr<std::shared_ptr<ShmArena>> ShmArena::Create(size_t bytes) {
  if (bytes == 0 || bytes % kChunk != 0) {
    return absl::InvalidArgumentError("arena size must be a positive multiple of 1 MiB");
  }
  int fd = memfd_create("rds-preload-arena", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return absl::InternalError(absl::StrFormat("memfd_create: %s", strerror(errno)));
  fd = sys::MakeInternal(fd);
  auto fail = [fd](const char* what) {
    absl::Status s = absl::InternalError(absl::StrFormat("%s: %s", what, strerror(errno)));
    sys::CloseInternal(fd);
    return s;
  };
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) return fail("ftruncate");
  if (sys::Fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return fail("F_ADD_SEALS");
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return fail("mmap");
  return std::shared_ptr<ShmArena>(new ShmArena(fd, static_cast<uint8_t*>(base), bytes));
}

ShmArena::ShmArena(int fd, uint8_t* base, size_t size)
    : fd_(fd),
      base_(base),
      size_(size),
      units_(size / kUnit),
      refs_(new std::atomic<uint32_t>[size / kUnit]),
      class_of_(new int8_t[size / kUnit]),
      chunk_used_(size / kChunk, 0) {
  for (size_t u = 0; u < units_; ++u) {
    refs_[u].store(0, std::memory_order_relaxed);
    class_of_[u] = -1;
  }
}

ShmArena::~ShmArena() {
  munmap(base_, size_);
  sys::CloseInternal(fd_);
}

int ShmArena::ClassOf(size_t size) {
  if (size <= kMinBlock) return 0;
  return std::bit_width(size - 1) - std::bit_width(kMinBlock - 1);
}

std::optional<Payload> ShmArena::Allocate(size_t size) {
  if (size < kMinBlock || size > kMaxBlock) return std::nullopt;
  const int c = ClassOf(size);
  size_t u;
  {
    rds::MutexLock lock(&mu_);
    if (free_[c].empty() && !CarveLocked(c) &&
        (!ReclaimExitedLocked() || (free_[c].empty() && !CarveLocked(c)))) {
      return std::nullopt;
    }
    u = free_[c].back();
    free_[c].pop_back();
    ++chunk_used_[u / kUnitsPerChunk];
    ++blocks_in_use_;
    bytes_in_use_ += kMinBlock << c;
  }
  refs_[u].store(1, std::memory_order_relaxed);
  // The payload's reference to the arena keeps it mapped while the payload lives.
  return Payload::Borrowed(base_ + u * kUnit, size, shared_from_this());
}

void ShmArena::Lend(pid_t peer, uint64_t offset) {
  rds::MutexLock lock(&mu_);
  refs_[offset / kUnit].fetch_add(1, std::memory_order_relaxed);
  ++loans_[std::max<pid_t>(peer, 0)][offset];
}

bool ShmArena::Return(pid_t peer, uint64_t offset) {
  rds::MutexLock lock(&mu_);
  // Only a loan this peer holds can end: a confused or hostile peer cannot
  // free a block that someone else still uses.
  auto p = loans_.find(std::max<pid_t>(peer, 0));
  if (p == loans_.end()) return false;
  auto l = p->second.find(offset);
  if (l == p->second.end()) return false;
  if (--l->second == 0) p->second.erase(l);
  if (p->second.empty()) loans_.erase(p);
  UnrefLocked(offset / kUnit);
  return true;
}

size_t ShmArena::LentTo(pid_t peer) const {
  rds::MutexLock lock(&mu_);
  auto p = loans_.find(std::max<pid_t>(peer, 0));
  if (p == loans_.end()) return 0;
  size_t n = 0;
  for (const auto& [offset, count] : p->second) n += count;
  return n;
}

void ShmArena::ReleasePayload(uint8_t* data, size_t) {
  const size_t u = static_cast<size_t>(data - base_) / kUnit;
  if (refs_[u].fetch_sub(1, std::memory_order_acq_rel) == 1) {
    rds::MutexLock lock(&mu_);
    FreeLocked(u);
  }
}

void ShmArena::UnrefLocked(size_t u) {
  if (refs_[u].fetch_sub(1, std::memory_order_acq_rel) == 1) FreeLocked(u);
}

bool ShmArena::CarveLocked(int c) {
  size_t chunk;
  if (!free_chunks_.empty()) {
    chunk = free_chunks_.back();
    free_chunks_.pop_back();
  } else if ((next_chunk_ + 1) * kChunk <= size_) {
    chunk = next_chunk_++;
  } else {
    return false;
  }
  // Blocks of this class, the lowest offset last (handed out first).
  const size_t first = chunk * kUnitsPerChunk;
  const size_t step = (kMinBlock << c) / kUnit;
  for (size_t b = first + kUnitsPerChunk; b > first;) {
    b -= step;
    class_of_[b] = static_cast<int8_t>(c);
    free_[c].push_back(static_cast<uint32_t>(b));
  }
  ++chunks_carved_;
  return true;
}

void ShmArena::FreeLocked(size_t u) {
  const int c = class_of_[u];
  free_[c].push_back(static_cast<uint32_t>(u));
  --blocks_in_use_;
  bytes_in_use_ -= kMinBlock << c;
  const size_t chunk = u / kUnitsPerChunk;
  if (--chunk_used_[chunk] == 0) {
    // A chunk with nothing in use goes back to the pool of chunks, so that a
    // workload whose sizes drift does not strand the arena in one size.
    const uint32_t lo = static_cast<uint32_t>(chunk * kUnitsPerChunk);
    const uint32_t hi = lo + static_cast<uint32_t>(kUnitsPerChunk);
    std::erase_if(free_[c], [lo, hi](uint32_t b) { return b >= lo && b < hi; });
    free_chunks_.push_back(static_cast<uint32_t>(chunk));
    --chunks_carved_;
  }
}

bool ShmArena::ReclaimExitedLocked() {
  bool freed = false;
  for (auto it = loans_.begin(); it != loans_.end();) {
    const pid_t pid = it->first;
    if (pid <= 0 || kill(pid, 0) == 0 || errno != ESRCH) {
      ++it;
      continue;
    }
    for (const auto& [offset, count] : it->second) {
      for (uint32_t i = 0; i < count; ++i) {
        const size_t u = offset / kUnit;
        freed |= refs_[u].load(std::memory_order_relaxed) == 1;
        UnrefLocked(u);
      }
    }
    loans_.erase(it++);
  }
  return freed;
}

ShmArena::Usage ShmArena::GetUsage() const {
  rds::MutexLock lock(&mu_);
  Usage u;
  u.blocks_in_use = blocks_in_use_;
  u.bytes_in_use = bytes_in_use_;
  for (const auto& [pid, offsets] : loans_) {
    for (const auto& [offset, count] : offsets) u.loans += count;
  }
  u.chunks_carved = chunks_carved_;
  return u;
}

}  // namespace rds
