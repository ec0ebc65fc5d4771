// engine/waiter.h — how a thread sleeps until an RDS socket changes.
//
// Each thread that blocks in an RDS call owns one Waiter: a timerfd it sleeps
// on with a blocking read(); its deadline arms the timer, a wake-up sets the
// expiration count directly (TFD_IOC_SET_TICKS, as cheap as an eventfd). A blocked call registers its Waiter with the
// socket(s) it waits for; whoever changes a socket's state wakes its waiters.
// The read has kernel RDS's signal behaviour (DESIGN.md §2.2): rds_recvmsg
// and rds_sendmsg return -ERESTARTSYS from their waits, so a signal restarts
// the call after an SA_RESTART handler and gives EINTR otherwise — with or
// without SO_RCVTIMEO/SO_SNDTIMEO (unlike sockets that use sock_intr_errno).
//
// Thread-safety: Wake() is safe from any thread; Sleep() only on the owning
// thread.
#ifndef RDS_ENGINE_WAITER_H_
#define RDS_ENGINE_WAITER_H_

#include <atomic>
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
  // RdsError(EINTR) for a signal whose handler lacks SA_RESTART.
  absl::Status Sleep(std::optional<absl::Time> deadline);
  // Clears a pending wake-up and disarms the timer.
  void Reset();
  // Replaces the timerfd (in a fork child, whose inherited one was closed).
  void Reopen();
  // The timerfd (readable once woken), for callers that add it to a wider
  // poll() (interposed poll).
  int fd() const { return fd_; }

  Waiter(const Waiter&) = delete;
  Waiter& operator=(const Waiter&) = delete;
  ~Waiter();

 private:
  Waiter();
  int fd_;
  std::atomic<bool> woken_{false};
  bool armed_ = false;  // a deadline may still be armed (owning thread only)
};

}  // namespace rds

#endif  // RDS_ENGINE_WAITER_H_
