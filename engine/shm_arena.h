// engine/shm_arena.h — this process's shared-memory arena for large payloads.
//
// A payload of 64 KiB or more that sendmsg() copies in is placed in a memfd
// that same-host peer engines map read-only: the link then carries only the
// header and the block's offset, and the receiver's recvmsg() copies straight
// out of the block — two copies per byte in all, as over TCP, instead of four
// (docs/perf/history.md §9.6).
//
// Blocks are powers of two from 64 KiB to 1 MiB, carved from 1 MiB chunks on
// demand (a chunk whose blocks are all free again goes back to be carved for
// any size); each has a reference count kept in private memory (a peer can read
// the arena but never touch its bookkeeping). The sending Message holds one
// reference (its Payload); each loan to a peer process holds another, taken
// by a link before the block's header is written and given back when that
// process says it is done — on any link, since a link may die while the
// peer still holds payloads it borrowed — or when it has exited. A block is
// reused only when no reference is left. When the arena is full, Allocate
// fails (after taking back the loans of exited peers) and the caller copies
// as before.
//
// The memfd is sealed against shrinking and growing, so a peer's mapping
// stays valid. A fork child keeps the parent's mapping (payloads it inherited
// stay readable) but never allocates from it: it starts its own arena
// (ResetAfterFork).
//
// Thread-safety: all members are safe for concurrent use.
#ifndef RDS_ENGINE_SHM_ARENA_H_
#define RDS_ENGINE_SHM_ARENA_H_

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "engine/message.h"
#include "engine/sync.h"

namespace rds {

// Guards the process's arena pointer; taken across fork() (engine/fork.cc).
rds::Mutex& ShmArenaMutex();

class ShmArena : public PayloadOwner, public std::enable_shared_from_this<ShmArena> {
 public:
  static constexpr size_t kMinBlock = size_t{64} << 10;  // smaller payloads go through the link
  static constexpr size_t kMaxBlock = size_t{1} << 20;   // RDS_MAX_MSG_SIZE
  static constexpr size_t kChunk = kMaxBlock;

  // The process's arena, created on first use with RDS_PRELOAD_SHM_ARENA_MB;
  // null when that is 0 or the arena cannot be created (logged once).
  static std::shared_ptr<ShmArena> Get();
  // The process's arena if it has been created, else null (never creates it).
  static std::shared_ptr<ShmArena> Existing();
  // Fork child: forget the parent's arena (its mapping is not inherited).
  static void ResetAfterFork();
  // A new arena of `bytes` (a multiple of 1 MiB), for Get() and tests.
  static absl::StatusOr<std::shared_ptr<ShmArena>> Create(size_t bytes);

  ~ShmArena() override;
  ShmArena(const ShmArena&) = delete;
  ShmArena& operator=(const ShmArena&) = delete;

  // A payload of `size` bytes (kMinBlock ≤ size ≤ kMaxBlock) in a free block,
  // or nullopt when none is free.
  std::optional<Payload> Allocate(size_t size);

  int fd() const { return fd_; }
  size_t size() const { return size_; }
  bool Owns(const Payload& p) const { return p.owner() == this; }
  // Offset of a payload this arena owns.
  uint64_t OffsetOf(const Payload& p) const { return static_cast<uint64_t>(p.data() - base_); }

  // A loan of the block at `offset` (which must be allocated) to the process
  // `peer` (≤ 0: unknown — such loans end only when returned).
  void Lend(pid_t peer, uint64_t offset);
  // The end of one loan to `peer`. False (and nothing changes) when `peer`
  // holds no loan of a block at `offset`.
  bool Return(pid_t peer, uint64_t offset);
  // Loans `peer` holds.
  size_t LentTo(pid_t peer) const;

  struct Usage {
    size_t blocks_in_use = 0;   // allocated blocks (any reference left)
    size_t bytes_in_use = 0;    // their sizes
    size_t loans = 0;           // loans to peers not yet returned
    size_t chunks_carved = 0;   // 1 MiB chunks given to a block size now
  };
  Usage GetUsage() const;

  void ReleasePayload(uint8_t* data, size_t size) override;

 private:
  static constexpr int kClasses = 5;  // 64K, 128K, 256K, 512K, 1M
  static constexpr size_t kUnit = kMinBlock;
  static constexpr size_t kUnitsPerChunk = kChunk / kUnit;

  ShmArena(int fd, uint8_t* base, size_t size);
  static int ClassOf(size_t size);
  // Gives a free chunk (returned, or never used) to class `c`; false if none.
  bool CarveLocked(int c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Puts the block at unit `u`, whose last reference went, on its free list.
  void FreeLocked(size_t u) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the loans of peers that have exited; true if a block was freed.
  bool ReclaimExitedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops one reference; at zero the block goes back to its free list.
  void UnrefLocked(size_t u) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int fd_;
  uint8_t* const base_;
  const size_t size_;
  const size_t units_;
  // Per 64 KiB unit: references of the block starting there (0: free or not
  // a block start), and its class (set when its chunk is carved).
  std::unique_ptr<std::atomic<uint32_t>[]> refs_;
  std::unique_ptr<int8_t[]> class_of_;

  mutable rds::Mutex mu_;
  std::vector<uint32_t> free_[kClasses] ABSL_GUARDED_BY(mu_);  // unit indices
  size_t chunks_carved_ ABSL_GUARDED_BY(mu_) = 0;  // chunks now given to a size
  size_t next_chunk_ ABSL_GUARDED_BY(mu_) = 0;     // chunks never used start here
  std::vector<uint32_t> free_chunks_ ABSL_GUARDED_BY(mu_);  // returned, wholly free
  std::vector<uint16_t> chunk_used_ ABSL_GUARDED_BY(mu_);   // blocks in use per chunk
  size_t bytes_in_use_ ABSL_GUARDED_BY(mu_) = 0;
  size_t blocks_in_use_ ABSL_GUARDED_BY(mu_) = 0;
  // peer pid → (offset → loans).
  absl::flat_hash_map<pid_t, absl::flat_hash_map<uint64_t, uint32_t>> loans_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rds

#endif  // RDS_ENGINE_SHM_ARENA_H_
