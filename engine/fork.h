// engine/fork.h — what a fork child does with the engine it inherited.
//
// The engine thread does not exist in a child, and its locks may be held by
// threads that do not exist there. The child abandons every engine object
// (leaks, never destroys them), closes the engine's fds (listeners, links,
// registry lock files: a child must not keep the parent's listening sockets
// open) and starts afresh on its next RDS call. Sockets inherited from the
// parent stay the parent's (DESIGN.md §2.4).
//
// Thread-safety: the fork functions only from pthread_atfork's handlers;
// the lost-fds ones from any thread, one at a time (the caller serialises).
#ifndef RDS_ENGINE_FORK_H_
#define RDS_ENGINE_FORK_H_

#include "engine/sync.h"

namespace rds {

// pthread_atfork handlers. Prepare takes every process-wide lock the child
// will use again, so no other thread can hold one at the moment of fork,
// and holds the shim's own threads (engine, sharing server) between two
// rounds, so that neither is half-way through an allocation (bounded: a
// round blocked on a lock the forking thread holds is not waited for); the
// parent releases them; the child releases them and resets the engine.
void PrepareEngineForFork();
void ParentAfterFork();
void ResetEngineAfterFork();

// The engine's fds were closed or replaced behind its back (sys::
// InternalFdsLost, or a dup2 onto `overwritten`): with the fork locks held
// (PrepareEngineForFork), abandons the engine as a fork child does — its
// thread leaves at its next wake-up, its objects are leaked — and releases
// the locks; the next RDS call starts afresh. With `overwritten` >= 0 the
// loss was seen as it happened, so the other internal fds are still ours and
// are closed; otherwise they are only forgotten (their numbers may be the
// application's by now).
void ResetEngineAfterLostFds(int overwritten);

// Who recovers when the engine finds its fds lost on its own (a wait on the
// engine that does not end): preload, which also owns the fd table. Set once.
void SetLostFdsHandler(void (*handler)());
// Runs that handler (from any thread with no engine locks held).
void HandleLostFds();

// The process-wide locks a fork child reuses (defined by their modules).
rds::Mutex& EngineStartMutex();
rds::Mutex& NetNsTableMutex();
rds::Mutex& HostRegistryMutex();

}  // namespace rds

#endif  // RDS_ENGINE_FORK_H_
