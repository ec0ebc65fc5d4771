// engine/sync.h — the mutex and notification types of the engine and the preload layer.
//
// absl::Mutex's interface (with its thread-safety annotations) over the C++ standard library's
// mutexes, rather than absl::Mutex itself, for two measured reasons:
//  * Debian's abseil is built with the Mutex deadlock detector active: callgrind put about a
//    fifth of the send path's instructions in it (GraphCycles, docs/perf/history.md). It can only be
//    switched off process-wide (absl::SetMutexDeadlockDetectionMode), which would change the
//    behaviour of an application's own abseil mutexes.
//  * Debian's abseil is not instrumented for ThreadSanitizer, which therefore cannot see the
//    happens-before edges of an absl::Mutex (scripts/test-sanitizers.sh runs the conformance
//    suite under TSan).
//
// Use: rds::Mutex, rds::MutexLock lock(&mu), rds::ReaderMutexLock, rds::Notification.
#ifndef RDS_ENGINE_SYNC_H_
#define RDS_ENGINE_SYNC_H_

#include <condition_variable>
#include <mutex>

#include "absl/base/const_init.h"
#include "absl/base/thread_annotations.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace rds {

// Readers are exclusive too: the few reader sections are short, and a plain mutex is cheaper
// than a reader-writer lock when uncontended (the common case).
class ABSL_LOCKABLE Mutex {
 public:
  constexpr Mutex() = default;
  constexpr explicit Mutex(absl::ConstInitType) {}  // constant-initialised, as std::mutex is
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { m_.lock(); }
  bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) { return m_.try_lock(); }
  // Tries for up to `limit` (polling: for rare waits only, such as fork's).
  bool TryLockFor(absl::Duration limit) ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) {
    const absl::Time deadline = absl::Now() + limit;
    while (!m_.try_lock()) {
      if (absl::Now() >= deadline) return false;
      absl::SleepFor(absl::Microseconds(50));
    }
    return true;
  }
  void Unlock() ABSL_UNLOCK_FUNCTION() { m_.unlock(); }
  void ReaderLock() ABSL_SHARED_LOCK_FUNCTION() { m_.lock(); }
  void ReaderUnlock() ABSL_UNLOCK_FUNCTION() { m_.unlock(); }
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

 private:
  std::mutex m_;
};

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

class ABSL_SCOPED_LOCKABLE ReaderMutexLock {
 public:
  explicit ReaderMutexLock(Mutex* mu) ABSL_SHARED_LOCK_FUNCTION(mu) : mu_(mu) { mu_->ReaderLock(); }
  ~ReaderMutexLock() ABSL_UNLOCK_FUNCTION() { mu_->ReaderUnlock(); }
  ReaderMutexLock(const ReaderMutexLock&) = delete;
  ReaderMutexLock& operator=(const ReaderMutexLock&) = delete;

 private:
  Mutex* const mu_;
};

class Notification {
 public:
  void Notify() {
    std::lock_guard<std::mutex> lock(m_);
    notified_ = true;
    cv_.notify_all();
  }
  bool HasBeenNotified() const {
    std::lock_guard<std::mutex> lock(m_);
    return notified_;
  }
  void WaitForNotification() const {
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait(lock, [this] { return notified_; });
  }
  bool WaitForNotificationWithDeadline(absl::Time deadline) const {
    std::unique_lock<std::mutex> lock(m_);
    return cv_.wait_until(lock, absl::ToChronoTime(deadline), [this] { return notified_; });
  }

 private:
  mutable std::mutex m_;
  mutable std::condition_variable cv_;
  bool notified_ = false;
};

}  // namespace rds

#endif  // RDS_ENGINE_SYNC_H_
