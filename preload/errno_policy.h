// preload/errno_policy.h — the one place where an engine result becomes what
// a libc call returns: the value, or -1 with errno.
//
// Every wrapper that handles an RDS fd runs its work through Run(): it
// refuses fds whose socket is not this process's (EBADF, DESIGN.md §2.4),
// preserves the caller's errno on success, and maps a failed absl::Status to
// its errno with engine/errors.h's ErrnoOf.
//
// Thread-safety: stateless.
#ifndef RDS_PRELOAD_ERRNO_POLICY_H_
#define RDS_PRELOAD_ERRNO_POLICY_H_

#include <cerrno>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/errors.h"
#include "preload/fd_table.h"

namespace rds::preload {

template <typename T>
T Fail(int err) {
  errno = err;
  return static_cast<T>(-1);
}

// Runs fn(RdsSocket&) for an RDS fd and converts its result. fn returns
// absl::Status (→ 0) or absl::StatusOr<V> (→ V).
template <typename R, typename F>
R Run(const FdEntry& entry, F&& fn) {
  if (entry.state != FdEntry::State::kOwned) return Fail<R>(EBADF);
  int saved = errno;
  auto result = fn(*entry.socket);
  if constexpr (std::is_same_v<decltype(result), absl::Status>) {
    if (!result.ok()) return Fail<R>(ErrnoOf(result));
    errno = saved;
    return 0;
  } else {
    if (!result.ok()) return Fail<R>(ErrnoOf(result.status()));
    errno = saved;
    return static_cast<R>(*result);
  }
}

}  // namespace rds::preload

#endif  // RDS_PRELOAD_ERRNO_POLICY_H_
