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
#include <cstring>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/errors.h"
#include "engine/log.h"
#include "preload/fd_table.h"

namespace rds::preload {

template <typename T>
T Fail(int err) {
  errno = err;
  return static_cast<T>(-1);
}

// Runs fn(RdsSocket&) for an RDS fd and converts its result. fn returns
// absl::Status (→ 0) or absl::StatusOr<V> (→ V).
// `call` names the interposed function for the trace log (level 5 prints
// every RDS call with its result and errno).
template <typename R, typename F>
R Run(const char* call, const FdEntry& entry, F&& fn) {
  if (entry.state != FdEntry::State::kOwned) {
    log::Trace("%s on another process's RDS socket = -1 EBADF", call);
    return Fail<R>(EBADF);
  }
  int saved = errno;
  auto result = fn(*entry.socket);
  absl::Status status;
  R value = 0;
  if constexpr (std::is_same_v<decltype(result), absl::Status>) {
    status = result;
  } else {
    status = result.status();
    if (result.ok()) value = static_cast<R>(*result);
  }
  if (!status.ok()) {
    int err = ErrnoOf(status);
    log::Trace("%s(socket %016x) = -1 %s", call, entry.socket->id, strerrorname_np(err));
    return Fail<R>(err);
  }
  log::Trace("%s(socket %016x) = %d", call, entry.socket->id, static_cast<long long>(value));
  errno = saved;
  return value;
}

}  // namespace rds::preload

#endif  // RDS_PRELOAD_ERRNO_POLICY_H_
