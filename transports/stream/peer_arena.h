// transports/stream/peer_arena.h — a same-host peer's payload arena, mapped read-only.
//
// The receiving half of shared-memory payloads (engine/shm_arena.h, DESIGN.md
// §9.6): a peer engine announces its arena on a link (the memfd arrives with
// SCM_RIGHTS), and every message whose header carries kExtShimPayloadRef
// borrows its payload from this mapping instead of reading it off the stream.
// When such a payload goes (recvmsg copied it out, or its socket dropped it),
// its offset is queued here and a link to the peer sends the queue back in
// kArenaRelease controls — along with whatever it sends next (a reply, an
// acknowledgement: no wake-up of its own), at once when the queue holds a
// quarter of the arena, and otherwise on the link's release timer (within
// milliseconds); until then the peer keeps the block.
//
// One PeerArena per peer process and arena, shared by all links to that
// process: the mapping lives as long as any link or borrowed payload uses
// it, which may be longer than the link that brought the payload. While no
// link is attached, releases wait (and keep the mapping alive); the next link
// on which the peer announces the same arena (the peer does so on every new
// link while it has blocks lent to us) takes them over. Waiting releases of a
// peer that has exited are dropped the next time an arena is mapped.
//
// Thread-safety: Map, Find, Borrow, Attach and Detach on the engine's loop
// (run lock held); ReleasePayload and TakeReleased from any thread.
#ifndef RDS_TRANSPORTS_STREAM_PEER_ARENA_H_
#define RDS_TRANSPORTS_STREAM_PEER_ARENA_H_

#include <cstddef>
#include <atomic>
#include <cstdint>
#include <sys/types.h>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/message.h"
#include "engine/sync.h"

namespace rds {

class PeerArena : public PayloadOwner, public std::enable_shared_from_this<PeerArena> {
 public:
  // The largest arena a peer may announce.
  static constexpr uint64_t kMaxSize = uint64_t{1} << 30;

  // The arena behind `fd` (taken: closed here whatever happens), which must
  // be a memfd sealed against shrinking, at least `size` bytes long,
  // announced by process `peer`: the one already mapped for that process if
  // it is the same file, else a new mapping (which replaces it for Find).
  static absl::StatusOr<std::shared_ptr<PeerArena>> Map(pid_t peer, int fd, uint64_t size);
  // Fork child: forget the parent's peers (engine/fork.cc).
  static void ResetAfterFork();
  ~PeerArena() override;
  PeerArena(const PeerArena&) = delete;
  PeerArena& operator=(const PeerArena&) = delete;

  // The `len` bytes at `offset`, borrowed until the payload is released.
  absl::StatusOr<Payload> Borrow(uint64_t offset, uint64_t len);
  // Offsets released since the last call, oldest first.
  std::vector<uint64_t> TakeReleased();
  // Whether releases are queued (a hint, without the lock).
  bool HasReleased() const { return has_released_.load(std::memory_order_relaxed); }
  // Payloads borrowed and not yet released.
  int64_t Borrowed() const { return borrowed_.load(std::memory_order_acquire); }
  // Puts back releases that a closing link could not send.
  void Requeue(absl::Span<const uint64_t> offsets);
  // Makes `link` the one that returns releases: `cue` runs (on the releasing
  // thread, no lock held) when the queue reaches a quarter of the arena, and
  // at once if releases are waiting. Links to one peer may overlap: the latest attached
  // returns releases, and when it detaches the one before it takes over.
  void Attach(const void* link, std::function<void()> cue);
  // `link` closed. With no link left, releases wait for the next.
  void Detach(const void* link);

  void ReleasePayload(uint8_t* data, size_t size) override;

 private:
  PeerArena(pid_t peer, const uint8_t* base, uint64_t size, uint64_t dev, uint64_t ino)
      : peer_(peer), base_(base), size_(size), dev_(dev), ino_(ino) {}
  // No link attached and the peer process is gone: drop waiting releases.
  void ForgetIfPeerExited();

  const pid_t peer_;
  const uint8_t* const base_;
  const uint64_t size_;
  const uint64_t dev_, ino_;  // the memfd's identity
  rds::Mutex mu_;
  // Attached links, oldest first; the last one's cue is used.
  std::vector<std::pair<const void*, std::function<void()>>> links_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> released_ ABSL_GUARDED_BY(mu_);
  uint64_t released_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<bool> has_released_{false};
  std::atomic<int64_t> borrowed_{0};
  // Set while releases wait with no link attached: they must not die with
  // the last borrowed payload.
  std::shared_ptr<PeerArena> self_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rds

#endif  // RDS_TRANSPORTS_STREAM_PEER_ARENA_H_
