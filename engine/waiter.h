// engine/waiter.h — how a thread sleeps until an RDS socket changes.
//
// Each thread that blocks in an RDS call owns one Waiter: an eventfd it sleeps
// on. A blocked call registers its Waiter with the socket(s) it waits for and
// sleeps in a system call whose signal behaviour is a socket's (DESIGN.md
// §2.2): without a timeout a blocking read() of the eventfd (restarted after
// an SA_RESTART handler, EINTR otherwise); with a timeout poll() (EINTR on any
// signal). Whoever changes a socket's state wakes its waiters.
//
// Thread-safety: Wake() is safe from any thread; Sleep() only on the owning
// thread.
#ifndef RDS_ENGINE_WAITER_H_
#define RDS_ENGINE_WAITER_H_

#include <optional>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace rds {

class Waiter {
 public:
  // The calling thread's waiter (created on first use, closed at thread exit).
  static Waiter& ForThisThread();

  // Wakes the owner (or makes its next Sleep() return at once).
  void Wake();
  // Sleeps until woken, the deadline passes, or a signal arrives.
  // OK when woken (possibly spuriously), RdsError(ETIMEDOUT) at the deadline,
  // RdsError(EINTR) for a signal that does not restart the call.
  absl::Status Sleep(std::optional<absl::Time> deadline);
  // Clears a pending wake-up.
  void Reset();
  // Replaces the eventfd (in a fork child, whose inherited one was closed).
  void Reopen();
  // The eventfd, for callers that add it to a wider poll() (interposed poll).
  int fd() const { return fd_; }

  Waiter(const Waiter&) = delete;
  Waiter& operator=(const Waiter&) = delete;
  ~Waiter();

 private:
  Waiter();
  int fd_;
};

}  // namespace rds

#endif  // RDS_ENGINE_WAITER_H_
