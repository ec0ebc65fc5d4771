// preload/lifecycle.h — process events the shim must follow: library load
// (inherited RDS fds), fork, vfork children, exec and exit, and the locks that
// must not be inherited held.
//
// Thread-safety: safe for concurrent use.
#ifndef RDS_PRELOAD_LIFECYCLE_H_
#define RDS_PRELOAD_LIFECYCLE_H_

#include "preload/memory_owner.h"

namespace rds::preload {

// The shim's version, as `meson.project_version()`.
inline constexpr char kVersion[] = RDS_PRELOAD_VERSION;

// Once, on the first RDS socket of the process: registers the fork handlers,
// installs crash handlers if asked (RDS_PRELOAD_BACKTRACE), prints the
// banner of non-default settings if asked (RDS_PRELOAD_SHOW_CONFIG).
void OnFirstRdsSocket();

// InVforkChild(): preload/memory_owner.h.

// The engine's descriptors were closed or replaced behind its back: by a
// raw close_range(2) system call (sys::InternalFdsLost, checked before a new
// RDS socket is made and whenever a wait on the engine does not end), or by
// the application's dup2/dup3 onto `overwritten`, seen as it happens. The
// process's RDS state starts afresh, as in a fork child: the engine is
// abandoned, every RDS fd still open becomes orphaned (EBADF; kernel RDS would
// keep it working), and the next RDS call starts a new engine. Logged once.
// No-op when nothing was lost (another thread recovered first).
void RecoverFromLostFds(int overwritten = -1);

// Before this process's image ends (exec, _exit, exit): waits, at most
// RDS_PRELOAD_EXIT_FLUSH_MS, until the messages sendmsg accepted are
// acknowledged by their receivers, as kernel RDS has transmitted them by the
// time sendmsg returns (DESIGN.md §4.1); then parks the sockets that other
// processes, or the next image, may hold (engine/share.h). Nothing is waited
// for in a process without an engine. In a vfork child (the parent's engine
// goes on) an exec only marks the parent's sockets as shared: the new image
// holds their descriptors. When the process is `exiting` (not exec), its
// engine's socket file is removed too.
void FlushBeforeImageEnds(bool exiting);

// exec failed: the sockets parked for the new image are this image's again;
// their descriptors are examined anew at their next use, which takes them back.
void AfterFailedExec();

}  // namespace rds::preload

#endif  // RDS_PRELOAD_LIFECYCLE_H_
