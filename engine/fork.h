// engine/fork.h — what a fork child does with the engine it inherited.
//
// The engine thread does not exist in a child, and its locks may be held by
// threads that do not exist there. The child abandons every engine object
// (leaks, never destroys them), closes the engine's fds (listeners, links,
// registry lock files: a child must not keep the parent's listening sockets
// open) and starts afresh on its next RDS call. Sockets inherited from the
// parent stay the parent's (DESIGN.md §2.4).
//
// Thread-safety: call only from pthread_atfork's child handler.
#ifndef RDS_ENGINE_FORK_H_
#define RDS_ENGINE_FORK_H_

#include "engine/sync.h"

namespace rds {

// pthread_atfork handlers. Prepare takes every process-wide lock the child
// will use again, so no other thread can hold one at the moment of fork;
// the parent releases them; the child releases them and resets the engine.
void PrepareEngineForFork();
void ParentAfterFork();
void ResetEngineAfterFork();

// The process-wide locks a fork child reuses (defined by their modules).
rds::Mutex& EngineStartMutex();
rds::Mutex& NetNsTableMutex();
rds::Mutex& HostRegistryMutex();

}  // namespace rds

#endif  // RDS_ENGINE_FORK_H_
