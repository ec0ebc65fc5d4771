// transports/stream/peer_arena.cc — mapping and borrowing from a peer's arena.
#include "transports/stream/peer_arena.h"
#include "engine/abandon.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "engine/sys.h"

namespace rds {

namespace {

// The arena last mapped per peer process (the engine's loop only).
absl::flat_hash_map<pid_t, std::weak_ptr<PeerArena>>* by_peer =
    new absl::flat_hash_map<pid_t, std::weak_ptr<PeerArena>>();

}  // namespace

void PeerArena::ResetAfterFork() {
  Abandon(by_peer);
  by_peer = new absl::flat_hash_map<pid_t, std::weak_ptr<PeerArena>>();
}

absl::StatusOr<std::shared_ptr<PeerArena>> PeerArena::Map(pid_t peer, int fd, uint64_t size) {
  struct stat st;
  const int seals = sys::Fcntl(fd, F_GET_SEALS, 0);
  absl::Status problem;
  if (size == 0 || size > kMaxSize) {
    problem = absl::InvalidArgumentError(absl::StrFormat("arena size %u out of range", size));
  } else if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
    // Without the seal the peer could shrink the file under our mapping, and
    // a read of the lost pages would kill this process with SIGBUS.
    problem = absl::InvalidArgumentError("arena fd is not a memfd sealed against shrinking");
  } else if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < size) {
    problem = absl::InvalidArgumentError("arena fd is smaller than announced");
  }
  if (!problem.ok()) {
    sys::CloseInternal(fd);
    return problem;
  }
  for (auto it = by_peer->begin(); it != by_peer->end();) {
    std::shared_ptr<PeerArena> known = it->second.lock();
    if (known) known->ForgetIfPeerExited();
    if (it->second.expired()) {
      by_peer->erase(it++);
    } else {
      ++it;
    }
  }
  if (peer > 0) {
    auto it = by_peer->find(peer);
    if (it != by_peer->end()) {
      std::shared_ptr<PeerArena> known = it->second.lock();
      if (known && known->dev_ == st.st_dev && known->ino_ == st.st_ino && known->size_ == size) {
        sys::CloseInternal(fd);
        return known;
      }
    }
  }
  void* base = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  const int err = errno;
  sys::CloseInternal(fd);  // the mapping keeps the memory
  if (base == MAP_FAILED) {
    return absl::InternalError(absl::StrFormat("mmap of a peer arena: %s", strerror(err)));
  }
  std::shared_ptr<PeerArena> arena(
      new PeerArena(peer, static_cast<const uint8_t*>(base), size, st.st_dev, st.st_ino));
  if (peer > 0) (*by_peer)[peer] = arena;
  return arena;
}

PeerArena::~PeerArena() { munmap(const_cast<uint8_t*>(base_), size_); }

absl::StatusOr<Payload> PeerArena::Borrow(uint64_t offset, uint64_t len) {
  if (offset > size_ || len > size_ - offset) {
    return absl::InvalidArgumentError(
        absl::StrFormat("payload [%u, +%u) outside the peer's arena of %u bytes", offset, len,
                        size_));
  }
  // Read-only mapping: a receiver never writes a payload (engine/message.h).
  borrowed_.fetch_add(1, std::memory_order_relaxed);
  return Payload::Borrowed(const_cast<uint8_t*>(base_) + offset, len, shared_from_this());
}

std::vector<uint64_t> PeerArena::TakeReleased() {
  rds::MutexLock lock(&mu_);
  released_bytes_ = 0;
  has_released_.store(false, std::memory_order_relaxed);
  return std::exchange(released_, {});
}

void PeerArena::Requeue(absl::Span<const uint64_t> offsets) {
  rds::MutexLock lock(&mu_);
  released_.insert(released_.begin(), offsets.begin(), offsets.end());
  if (!released_.empty()) has_released_.store(true, std::memory_order_relaxed);
}

void PeerArena::Attach(const void* link, std::function<void()> cue) {
  bool pending;
  std::shared_ptr<PeerArena> self;  // the attaching link holds a reference
  {
    rds::MutexLock lock(&mu_);
    std::erase_if(links_, [link](const auto& l) { return l.first == link; });
    links_.emplace_back(link, cue);
    pending = !released_.empty();
    self = std::move(self_);
  }
  if (pending && cue) cue();
}

void PeerArena::ForgetIfPeerExited() {
  std::shared_ptr<PeerArena> self;  // the caller holds a reference
  rds::MutexLock lock(&mu_);
  if (!links_.empty() || peer_ <= 0 || kill(peer_, 0) == 0 || errno != ESRCH) return;
  released_.clear();
  self = std::move(self_);
}

void PeerArena::Detach(const void* link) {
  std::function<void()> cue;
  {
    rds::MutexLock lock(&mu_);
    const bool was_last = !links_.empty() && links_.back().first == link;
    std::erase_if(links_, [link](const auto& l) { return l.first == link; });
    // Releases the departing link was cued for go to the one that remains.
    if (was_last && !links_.empty() && !released_.empty()) cue = links_.back().second;
    if (links_.empty() && !released_.empty() && !self_) self_ = shared_from_this();
  }
  if (cue) cue();
}

void PeerArena::ReleasePayload(uint8_t* data, size_t size) {
  std::function<void()> cue;
  {
    rds::MutexLock lock(&mu_);
    released_.push_back(static_cast<uint64_t>(data - base_));
    has_released_.store(true, std::memory_order_relaxed);
    borrowed_.fetch_sub(1, std::memory_order_release);  // after the offset is queued
    // Usually the next message a link sends to the peer takes the releases
    // along (StreamLink::Send); a link is cued only when so much is held back
    // that the peer could run short.
    const uint64_t before = released_bytes_;
    released_bytes_ += size;
    const uint64_t enough = size_ / 4;
    if (before < enough && released_bytes_ >= enough && !links_.empty()) {
      cue = links_.back().second;
    }
    // (The payload's owner reference is alive during this call.)
    if (links_.empty() && !self_) self_ = shared_from_this();
  }
  if (cue) cue();
}

}  // namespace rds
