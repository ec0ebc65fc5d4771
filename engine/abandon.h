// engine/abandon.h — objects given up without being destroyed.
//
// A fork child, and a process whose engine lost its fds (engine/fork.h), give
// up the engine's objects without destroying them: their locks may be held by
// threads that no longer exist or no longer run them, and destructors would
// close fd numbers that may be someone else's now. Abandon() keeps such an
// object reachable from a process-wide list, so that it is never freed and
// leak checkers (LeakSanitizer at exit) do not report it as lost.
//
// Thread-safety: safe for concurrent use; lock-free (usable in a fork child
// whatever other threads held at the fork).
#ifndef RDS_ENGINE_ABANDON_H_
#define RDS_ENGINE_ABANDON_H_

namespace rds {

// Keeps `object` (any heap object, or null: ignored) forever.
void Abandon(const void* object);

}  // namespace rds

#endif  // RDS_ENGINE_ABANDON_H_
