// engine/waiter.cc — per-thread timerfd sleeping with RDS's signal semantics.
//
// The wait object is a timerfd: a blocking read() of it returns -ERESTARTSYS
// on a signal (restarted after an SA_RESTART handler, EINTR otherwise), as
// rds_recvmsg and rds_sendmsg's waits do, with or without a timeout. The
// deadline arms the timer. A waker sets the timerfd's expiration count with
// TFD_IOC_SET_TICKS, which wakes the reader at once like an eventfd write;
// arming the timer to expire "now" instead costs a timer interrupt, ~20 µs
// per wake-up on a KVM guest (measured: docs/perf/history.md). Kernels without
// CONFIG_CHECKPOINT_RESTORE lack the ioctl; the timer is armed there.
#include "engine/waiter.h"
#include "engine/abandon.h"

#include <poll.h>
#include <sys/ioctl.h>
#include <sys/timerfd.h>

#include <cerrno>
#include <cstdint>

#include "absl/time/clock.h"
#include "engine/errors.h"
#include "engine/sync.h"
#include "engine/sys.h"

// <linux/timerfd.h> defines it but clashes with <sys/timerfd.h>.
#ifndef TFD_IOC_SET_TICKS
#define TFD_IOC_SET_TICKS _IOW('T', 0, uint64_t)
#endif

namespace rds {
namespace {

int NewTimerFd() {
  return sys::MakeInternal(timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC));
}

void Arm(int fd, absl::Duration in) {
  struct itimerspec its = {};
  // A zero it_value would disarm: "now" is the smallest positive delay.
  its.it_value = absl::ToTimespec(std::max(in, absl::Nanoseconds(1)));
  timerfd_settime(fd, 0, &its, nullptr);
}

void Disarm(int fd) {
  struct itimerspec off = {};
  timerfd_settime(fd, 0, &off, nullptr);
}

// False once the kernel has refused TFD_IOC_SET_TICKS (then wakes arm the timer).
std::atomic<bool> g_set_ticks_works{true};

// Waiters of exited threads, for the next new thread.
rds::Mutex g_free_mu(absl::kConstInit);
std::vector<Waiter*>* g_free ABSL_GUARDED_BY(g_free_mu) = nullptr;

// Bumped when the internal fds were lost: a waiter made before takes a new
// timerfd at its owner's next ForThisThread().
std::atomic<uint64_t> g_fd_epoch{0};

thread_local WakeBatch* t_wake_batch = nullptr;
thread_local Waiter* t_own_waiter = nullptr;

}  // namespace

Waiter& Waiter::ForThisThread() {
  struct Slot {
    Waiter* w;
    Slot() {
      {
        rds::MutexLock lock(&g_free_mu);
        if (g_free != nullptr && !g_free->empty()) {
          w = g_free->back();
          g_free->pop_back();
          return;
        }
      }
      w = new Waiter();
    }
    ~Slot() {
      w->Reset();
      rds::MutexLock lock(&g_free_mu);
      if (g_free == nullptr) g_free = new std::vector<Waiter*>();
      g_free->push_back(w);
    }
  };
  thread_local Slot slot;
  t_own_waiter = slot.w;
  if (slot.w->fd_epoch_ != g_fd_epoch.load(std::memory_order_acquire)) slot.w->Reopen();
  return *slot.w;
}

void Waiter::ReplaceAllAfterLostFds() {
  {
    rds::MutexLock lock(&g_free_mu);
    Abandon(g_free);  // with their lost timerfds
    g_free = nullptr;
  }
  g_fd_epoch.fetch_add(1, std::memory_order_release);
}

void Waiter::ResetFreeListAfterFork() {
  // The lock may have been held by a thread that does not exist here.
  new (&g_free_mu) rds::Mutex();
  Abandon(g_free);  // their timerfds were closed
  g_free = nullptr;
}

Waiter::Waiter() : fd_(NewTimerFd()), fd_epoch_(g_fd_epoch.load(std::memory_order_acquire)) {}

void Waiter::Reopen() {
  fd_epoch_ = g_fd_epoch.load(std::memory_order_acquire);
  fd_ = NewTimerFd();
  woken_.store(false);
  armed_ = false;
}

void Waiter::Wake() {
  // Already woken: the owner has not consumed that wake-up yet, or consumed
  // it and will re-check the state this Wake() announces before sleeping.
  if (woken_.exchange(true, std::memory_order_seq_cst)) return;
  // The owner itself (delivering while it drives the loop) is awake.
  if (this == t_own_waiter) return;
  if (WakeBatch* batch = t_wake_batch) {
    batch->queued_.push_back(this);
    return;
  }
  Signal();
}

void Waiter::SignalFd(int fd) {
  if (g_set_ticks_works.load(std::memory_order_relaxed)) {
    uint64_t ticks = 1;
    if (sys::Ioctl(fd, TFD_IOC_SET_TICKS, &ticks) == 0) return;
    if (errno != ENOTTY && errno != EINVAL) return;  // e.g. EBADF after a fork: nobody sleeps
    g_set_ticks_works.store(false, std::memory_order_relaxed);
  }
  Arm(fd, absl::ZeroDuration());
}

void Waiter::Reset() {
  Disarm(fd_);
  armed_ = false;
  uint64_t v;
  struct pollfd p = {fd_, POLLIN, 0};
  if (sys::Poll(&p, 1, 0) == 1) sys::Read(fd_, &v, sizeof(v));
  woken_.store(false);
}

absl::Status Waiter::Sleep(std::optional<absl::Time> deadline) {
  if (deadline) {
    absl::Duration left = *deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return RdsError(ETIMEDOUT);
    Arm(fd_, left);
    armed_ = true;
  } else if (armed_) {
    // A deadline of an earlier sleep would end this untimed one.
    Disarm(fd_);
    armed_ = false;
  }
  // A Wake() between registration and here re-armed the timer or set the
  // flag; either way the read below does not sleep past it.
  if (woken_.exchange(false, std::memory_order_seq_cst)) return absl::OkStatus();
  uint64_t v;
  if (sys::Read(fd_, &v, sizeof(v)) < 0) {
    return errno == EINTR ? RdsError(EINTR) : RdsError(EIO);
  }
  woken_.store(false);
  if (deadline && absl::Now() >= *deadline) return RdsError(ETIMEDOUT);
  return absl::OkStatus();
}

WakeBatch::WakeBatch() : outer_(t_wake_batch) { t_wake_batch = this; }

WakeBatch::~WakeBatch() {
  t_wake_batch = outer_;
  Flush();
}

WakeBatch* WakeBatch::Current() { return t_wake_batch; }

void WakeBatch::Flush() {
  for (Waiter* w : queued_) w->Signal();
  queued_.clear();
  for (int fd : queued_fds_) Waiter::SignalFd(fd);
  queued_fds_.clear();
}

}  // namespace rds
