// preload/memory_owner.cc — see memory_owner.h.
#include "preload/memory_owner.h"

#include <pthread.h>

#include <atomic>

#include "engine/sys.h"

namespace rds::preload {
namespace {

// The process whose memory this is: set at load and in every fork child,
// before anything else runs there.
std::atomic<pid_t> memory_owner{0};

void NoteMemoryOwner() { memory_owner.store(sys::GetPid(), std::memory_order_relaxed); }

__attribute__((constructor)) void FollowMemoryOwner() {
  NoteMemoryOwner();
  pthread_atfork(nullptr, nullptr, NoteMemoryOwner);
}

}  // namespace

bool InVforkChild() {
  const pid_t owner = memory_owner.load(std::memory_order_relaxed);
  return owner != 0 && owner != sys::GetPid();
}

}  // namespace rds::preload
