// preload/lifecycle.h — process events the shim must follow: library load
// (inherited RDS fds), fork, and the locks that must not be inherited held.
//
// Thread-safety: EnsureForkHandlers is safe for concurrent use.
#ifndef RDS_PRELOAD_LIFECYCLE_H_
#define RDS_PRELOAD_LIFECYCLE_H_

namespace rds::preload {

// Registers the pthread_atfork handlers (once, on the first RDS socket).
void EnsureForkHandlers();

}  // namespace rds::preload

#endif  // RDS_PRELOAD_LIFECYCLE_H_
