// engine/fork.cc — resetting the engine in a fork child.
#include "engine/fork.h"

#include <atomic>

#include "engine/bind.h"
#include "engine/cong.h"
#include "engine/engine.h"
#include "engine/log.h"
#include "engine/netns.h"
#include "engine/readiness.h"
#include "engine/registry.h"
#include "engine/share.h"
#include "engine/shm_arena.h"
#include "engine/small_pool.h"
#include "engine/socket.h"
#include "engine/stats.h"
#include "engine/sys.h"
#include "engine/waiter.h"
#include "transports/registry.h"

namespace rds {

namespace {

rds::Mutex* const* ForkLocks() {
  static rds::Mutex* locks[] = {&EngineStartMutex(), &NetNsTableMutex(), &HostRegistryMutex(),
                                 &small_pool::ForkMutex(), &stats::ForkMutex(),
                                 &SocketIdMutex(), &ShmArenaMutex(), nullptr};
  return locks;
}

// The shim's own threads held between rounds for a fork (engine_mu, a fork
// lock, keeps the engine from changing meanwhile).
struct HeldThreads {
  Engine* engine = nullptr;
  bool server = false;
};
HeldThreads held;

// How long a fork waits for each of the shim's threads to end its round. A
// round that does not end in time waits for a lock the forking thread holds:
// the thread is then blocked, which is no hazard.
constexpr absl::Duration kRoundWait = absl::Milliseconds(100);

}  // namespace

void PrepareEngineForFork() {
  for (rds::Mutex* const* m = ForkLocks(); *m; ++m) (*m)->Lock();
  // The shim's threads must not be half-way through an allocation at the
  // instant of fork: a C library's malloc is fork-safe, but an allocator
  // that is not (GCC 12's AddressSanitizer) would leave the child's locked.
  // The sharing server first: its calls may wait for an engine round.
  held.server = share::HoldServerForFork(kRoundWait);
  if (Engine* e = Engine::IfRunning(); e != nullptr && e->HoldForFork(kRoundWait)) held.engine = e;
}

void ParentAfterFork() {
  if (held.engine != nullptr) held.engine->ReleaseAfterFork();
  if (held.server) share::ReleaseServerAfterFork();
  held = {};
  for (rds::Mutex* const* m = ForkLocks(); *m; ++m) (*m)->Unlock();
}

void ResetEngineAfterFork() {
  ParentAfterFork();  // the child's copies are held by this thread

  sys::ForEachInternal([](int fd) {
    if (!sys::KeptInForkChild(fd)) sys::Close(fd);
  });
  sys::ForgetAllInternal();
  Engine::ResetAfterFork();
  ResetSocketIdsAfterFork();
  NetNs::ResetAfterFork();
  ResetBindTableAfterFork();
  CongestionTable::ResetAfterFork();
  ShmArena::ResetAfterFork();
  ResetTransportsAfterFork();
  ResetSocketListAfterFork();
  share::ResetAfterFork();
  HostRegistry::Get().ResetAfterFork();
  log::ResetAfterFork();
  Waiter::ResetFreeListAfterFork();
  Waiter::ForThisThread().Reopen();
}

void ResetEngineAfterLostFds(int overwritten) {
  // The loop and the sharing server first: from now on their threads touch
  // no fd.
  Engine::AbandonAfterLostFds();
  share::ResetAfterFork();
  if (overwritten >= 0) {
    sys::ForEachInternal([overwritten](int fd) {
      if (fd != overwritten && !sys::KeptInForkChild(fd)) sys::Close(fd);
    });
  }
  sys::ForgetAllInternal();
  NetNs::ResetAfterFork();
  ResetBindTableAfterFork();
  CongestionTable::ResetAfterFork();
  ShmArena::ResetAfterFork();
  ResetTransportsAfterFork();
  ResetSocketListAfterFork();
  HostRegistry::Get().ResetAfterFork();
  log::ResetAfterFork();
  Waiter::ReplaceAllAfterLostFds();
  ParentAfterFork();
}

namespace {
std::atomic<void (*)()> lost_fds_handler{nullptr};
}  // namespace

void SetLostFdsHandler(void (*handler)()) { lost_fds_handler.store(handler); }

void HandleLostFds() {
  if (void (*h)() = lost_fds_handler.load()) h();
}

}  // namespace rds
