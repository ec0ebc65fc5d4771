// preload/fd_table.h — which fds are RDS sockets (DESIGN.md §2.1).
//
// Indexed by fd number: a two-level array (chunks of 1024 slots allocated on
// first use), each slot a presence byte plus an atomic shared_ptr to an entry.
// Lookups never lock: a process that never made an RDS socket pays one
// relaxed load per wrapped call. Writers (socket, dup, close, fork) take a
// small mutex that is never held across a blocking call. An entry is
// immutable; changing an fd's state replaces its entry.
//
// Thread-safety: safe for concurrent use.
#ifndef RDS_PRELOAD_FD_TABLE_H_
#define RDS_PRELOAD_FD_TABLE_H_

#include <memory>
#include <utility>
#include <vector>

#include "engine/socket.h"

namespace rds::preload {

struct FdEntry {
  enum class State {
    kOwned,     // this process's RDS socket
    kOrphaned,  // an RDS fd this process cannot use (EBADF): its engine was lost
    kPending,   // an inherited RDS fd not yet examined (adopted on first use)
  };
  State state;
  std::shared_ptr<RdsSocket> socket;  // null unless kOwned
};

// The entry for `fd`, or null if it is not an RDS fd. Pending entries are
// adopted (or orphaned) here, on first use.
std::shared_ptr<const FdEntry> Lookup(int fd);
// The entry for `fd` for the length of one wrapped call, without a
// reference count of its own (four atomic operations per call on the 64 B
// stream, docs/perf/history.md §9.9): each thread keeps a reference to the entry its
// last call used, checked against the table's generation. A call made while
// another is in progress on the same thread (a signal handler) takes a
// reference of its own. Not to be kept beyond the call.
class CallEntry {
 public:
  CallEntry() = default;
  CallEntry(CallEntry&& other) noexcept
      : entry_(other.entry_), borrowed_(other.borrowed_), owned_(std::move(other.owned_)) {
    other.entry_ = nullptr;
    other.borrowed_ = false;
  }
  CallEntry& operator=(CallEntry&&) = delete;
  ~CallEntry();
  explicit operator bool() const { return entry_ != nullptr; }
  const FdEntry& operator*() const { return *entry_; }
  const FdEntry* operator->() const { return entry_; }

 private:
  friend CallEntry LookupForCall(int fd);
  const FdEntry* entry_ = nullptr;
  bool borrowed_ = false;                  // the thread's cached reference
  std::shared_ptr<const FdEntry> owned_;  // otherwise a reference of its own
};
CallEntry LookupForCall(int fd);

// True once this process has had any RDS fd.
bool AnyRds();
// Fast check without adoption.
bool MaybeRds(int fd);

// Records `fd` as referring to `socket` (socket(), dup, adoption).
void Publish(int fd, std::shared_ptr<RdsSocket> socket);
void PublishOrphan(int fd);
void PublishPending(int fd);
// Forgets `fd`; returns its entry (for close).
std::shared_ptr<const FdEntry> Unpublish(int fd);

// Fork: the table's writer lock is held across fork (prepare → parent/child).
void LockTableForFork();
void UnlockTableAfterFork();
// Fork child: every entry is examined anew at its next use (AdoptIfRds):
// the sockets belong to the parent, which the child reaches through
// engine/share.h.
void ReexamineAllAfterFork();
// A failed exec: entries whose socket this process parked are examined anew.
void ReexamineReleased();
// The engine's fds were lost (preload/lifecycle.h), with the writer lock held:
// an fd that is still the backing socket of its entry becomes orphaned (its
// engine is gone); any other number is forgotten (it was closed too, or is
// another file now).
void ForgetLostAfterLostFds();

// This process's RDS fds whose socket it uses (owned or remote), with it.
std::vector<std::pair<int, std::shared_ptr<RdsSocket>>> OwnedFds();

// Examines an fd that arrived from elsewhere (SCM_RIGHTS, exec, fork) and, if
// it is an RDS fd, records it: this process's socket for it, a remote one
// when another process owns it, or one taken over (engine/share.h).
void AdoptIfRds(int fd);

}  // namespace rds::preload

#endif  // RDS_PRELOAD_FD_TABLE_H_
