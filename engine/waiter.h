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
// A thread that holds the event loop's run lock defers its Wake() system
// calls (WakeBatch) until it has released the lock: a woken application
// thread on the same core preempts its waker at once, and would otherwise find
// the run lock and the socket's lock still held (a futex round trip and two
// extra context switches per message, measured: docs/perf/history.md).
//
// Waiter objects live as long as the process: a thread's waiter returns to a
// free list at thread exit and serves the next new thread, so a Wake() that
// races its owner's exit reaches a live object (at worst a spurious wake-up,
// which every sleeper tolerates).
//
// Thread-safety: Wake() is safe from any thread; Sleep() only on the owning
// thread.
#ifndef RDS_ENGINE_WAITER_H_
#define RDS_ENGINE_WAITER_H_

#include <atomic>
#include <optional>

#include "absl/container/inlined_vector.h"

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace rds {

class Waiter {
 public:
  // The calling thread's waiter (taken from the free list or created on first
  // use, returned to the free list at thread exit).
  static Waiter& ForThisThread();
  // In a fork child: forget the free list (its timerfds were closed).
  static void ResetFreeListAfterFork();
  // The internal fds were lost (engine/fork.h): every thread's waiter takes
  // a new timerfd at its next use (the old number is not closed: it may be
  // the application's now), and the free list is forgotten.
  static void ReplaceAllAfterLostFds();

  // Wakes the owner (or makes its next Sleep() return at once).
  void Wake();
  // Sleeps until woken, the deadline passes, or a signal arrives.
  // OK when woken (possibly spuriously), RdsError(ETIMEDOUT) at the deadline,
  // RdsError(EINTR) for a signal whose handler lacks SA_RESTART.
  absl::Status Sleep(std::optional<absl::Time> deadline);
  // Consumes a wake-up announced since the last Sleep() or TakeWake().
  bool TakeWake() { return woken_.exchange(false, std::memory_order_seq_cst); }
  // Clears a pending wake-up and disarms the timer.
  void Reset();
  // Replaces the timerfd (in a fork child, whose inherited one was closed).
  void Reopen();
  // The timerfd (readable once woken), for callers that add it to a wider
  // poll() (interposed poll).
  int fd() const { return fd_; }

  Waiter(const Waiter&) = delete;
  Waiter& operator=(const Waiter&) = delete;

 private:
  friend class WakeBatch;
  Waiter();
  ~Waiter() = delete;  // never destroyed (see above)
  // The system call that ends the owner's read() (or epoll_wait, driving).
  void Signal() { SignalFd(fd_); }
  static void SignalFd(int fd);
  int fd_;
  uint64_t fd_epoch_;  // the fd epoch its timerfd was made in (ReplaceAllAfterLostFds)
  std::atomic<bool> woken_{false};
  bool armed_ = false;  // a deadline may still be armed (owning thread only)
};

// Defers the Wake() system calls made on this thread while it exists (they
// only set the waiter's flag and queue it), until Flush(). Nests: the
// innermost batch collects. Not movable; one thread only.
class WakeBatch {
 public:
  WakeBatch();
  // Stops collecting and flushes whatever is still queued.
  ~WakeBatch();
  WakeBatch(const WakeBatch&) = delete;
  WakeBatch& operator=(const WakeBatch&) = delete;

  // Wakes everything queued so far (and keeps collecting). Call it after
  // releasing the locks a woken thread will want.
  void Flush();
  // Queues a wake-up of the waiter whose timerfd is `fd` (the event loop
  // forwarding an epoll event that reached the wrong thread).
  void QueueFd(int fd) { queued_fds_.push_back(fd); }

  // The batch collecting on this thread, or null.
  static WakeBatch* Current();

 private:
  friend class Waiter;
  absl::InlinedVector<Waiter*, 8> queued_;
  absl::InlinedVector<int, 2> queued_fds_;
  WakeBatch* outer_;
};

}  // namespace rds

#endif  // RDS_ENGINE_WAITER_H_
