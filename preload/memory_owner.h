// preload/memory_owner.h — whose memory this is: the process that loaded the
// shim or a fork child of it, as opposed to a vfork child borrowing a
// parent's memory. Depends on nothing else of the preload layer (the SDP
// table's publisher and its unit tests use it alone).
//
// Thread-safety: safe for concurrent use.
#ifndef RDS_PRELOAD_MEMORY_OWNER_H_
#define RDS_PRELOAD_MEMORY_OWNER_H_

namespace rds::preload {

// True in a child that shares this process's memory until it execs or exits
// (vfork(), posix_spawn's clone(CLONE_VM|CLONE_VFORK), CPython's
// _posixsubprocess): the fd table, the sockets and the engine in memory are the
// parent's, while the descriptors are the child's own copies. Wrappers called
// there only make the system call, never touch that state (DESIGN.md §2.4).
// One getpid(2); call it only where the state would be touched.
bool InVforkChild();

}  // namespace rds::preload

#endif  // RDS_PRELOAD_MEMORY_OWNER_H_
