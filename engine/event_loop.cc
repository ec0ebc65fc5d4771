// engine/event_loop.cc — epoll, timers and posted tasks.
#include "engine/event_loop.h"

#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <cstdint>
#include <limits>

#include "absl/container/inlined_vector.h"
#include "absl/time/clock.h"
#include "conf/settings.h"
#include "engine/errors.h"
#include "engine/log.h"
#include "engine/signals.h"
#include "engine/stats.h"
#include "engine/sys.h"
#include "engine/waiter.h"

namespace rds {
namespace {

constexpr int kMaxEvents = 64;

// The thread holds the run lock (InLoop()).
thread_local bool t_in_loop = false;
// The timerfd of the waiter this thread is driving for, or -1.
thread_local int t_driver_fd = -1;

int64_t MonotonicNow() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

}  // namespace

EventLoop::EventLoop() : lease_(absl::Microseconds(conf::Get().recv_drive_lease_us)) {
  epfd_ = sys::MakeInternal(epoll_create1(EPOLL_CLOEXEC));
  wake_fd_ = sys::MakeInternal(sys::EventFd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  struct epoll_event ev = {};
  ev.events = EPOLLIN;
  ev.data.fd = wake_fd_;
  sys::EpollCtl(epfd_, EPOLL_CTL_ADD, wake_fd_, &ev);
}

EventLoop::~EventLoop() {
  sys::CloseInternal(wake_fd_);
  sys::CloseInternal(epfd_);
}

void EventLoop::Add(int fd, uint32_t events, FdHandler handler) {
  handlers_[fd] = std::make_shared<FdHandler>(std::move(handler));
  struct epoll_event ev = {};
  ev.events = events;
  ev.data.fd = fd;
  if (sys::EpollCtl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    log::Error("epoll_ctl(ADD, %d): %s", fd, strerror(errno));
  }
}

void EventLoop::Modify(int fd, uint32_t events) {
  struct epoll_event ev = {};
  ev.events = events;
  ev.data.fd = fd;
  sys::EpollCtl(epfd_, EPOLL_CTL_MOD, fd, &ev);
}

void EventLoop::Remove(int fd) {
  sys::EpollCtl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
  handlers_.erase(fd);
}

EventLoop::TimerId EventLoop::After(absl::Duration delay, Task task) {
  TimerId id = next_timer_++;
  timers_[id] = std::move(task);
  timer_heap_.push({absl::Now() + delay, id});
  return id;
}

void EventLoop::Cancel(TimerId id) { timers_.erase(id); }

void EventLoop::Post(Task task) {
  bool was_empty;
  {
    rds::MutexLock lock(&task_mu_);
    was_empty = tasks_.empty();
    tasks_.push_back(std::move(task));
  }
  // A thread running the loop drains the queue before it sleeps.
  if (was_empty && !t_in_loop) Kick();
}

void EventLoop::Defer(Task task) { deferred_.push_back(std::move(task)); }

void EventLoop::RunDeferred() {
  // A deferred task may defer another (it runs in the next round).
  std::vector<Task> batch;
  batch.swap(deferred_);
  for (Task& t : batch) t();
}

void EventLoop::DrainTasks() {
  std::deque<Task> batch;
  {
    rds::MutexLock lock(&task_mu_);
    batch.swap(tasks_);
  }
  for (Task& t : batch) t();
}

int EventLoop::NextTimeoutMs() {
  while (!timer_heap_.empty() && !timers_.contains(timer_heap_.top().id)) timer_heap_.pop();
  if (timer_heap_.empty()) return -1;
  absl::Duration d = timer_heap_.top().when - absl::Now();
  if (d <= absl::ZeroDuration()) return 0;
  return static_cast<int>(absl::ToInt64Milliseconds(absl::Ceil(d, absl::Milliseconds(1))));
}

void EventLoop::RunDueTimers() {
  absl::Time now = absl::Now();
  while (!timer_heap_.empty() && timer_heap_.top().when <= now) {
    TimerId id = timer_heap_.top().id;
    timer_heap_.pop();
    auto it = timers_.find(id);
    if (it == timers_.end()) continue;
    Task t = std::move(it->second);
    timers_.erase(it);
    t();
  }
}

bool EventLoop::InLoop() { return t_in_loop; }

bool EventLoop::HoldRoundsForFork(absl::Duration limit) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (t_in_loop) return false;
  return run_mu_.TryLockFor(limit);
}

void EventLoop::ReleaseRoundsAfterFork() ABSL_NO_THREAD_SAFETY_ANALYSIS { run_mu_.Unlock(); }

bool EventLoop::TasksPending() {
  rds::MutexLock lock(&task_mu_);
  return !tasks_.empty();
}

void EventLoop::LockRun() {
  run_mu_.Lock();
  t_in_loop = true;
}

void EventLoop::UnlockRun(WakeBatch& wakes) {
  t_in_loop = false;
  run_mu_.Unlock();
  wakes.Flush();
}

void EventLoop::NudgePoller() {
  // The loop thread may be in epoll_wait: make it look again (and park).
  if (pollers_.load(std::memory_order_seq_cst) > 0) {
    uint64_t one = 1;
    sys::Write(wake_fd_, &one, sizeof(one));
  }
}

bool EventLoop::TryRunInline(absl::FunctionRef<bool()> fn) {
  if (!run_mu_.TryLock()) return false;
  t_in_loop = true;
  WakeBatch wakes;
  const bool idle = !TasksPending();
  const TimerId timers_before = next_timer_;
  bool done = idle && fn();
  if (done) RunDeferred();
  // A timer started here may be due before the sleeping loop's timeout.
  const bool new_timer = next_timer_ != timers_before;
  const bool pending = TasksPending();  // posted by fn (it cannot run them: order)
  UnlockRun(wakes);
  if (new_timer || pending) Kick();
  return done;
}

void EventLoop::Dispatch(const struct epoll_event* events, int n) {
  for (int i = 0; i < n; ++i) {
    int fd = events[i].data.fd;
    if (fd == wake_fd_) {
      uint64_t v;
      sys::Read(wake_fd_, &v, sizeof(v));
      continue;
    }
    auto it = handlers_.find(fd);
    if (it == handlers_.end()) {
      // A driver's waiter fired, but epoll gave the event to this thread:
      // signal it again (after the run lock is released, when this thread is
      // not in epoll_wait, so the driver gets the new edge). On the driver
      // itself the event has done its work (ending epoll_wait; the waiter's
      // flag decides): signalling again would only wake it again, at once.
      if (fd == driver_fd_.load(std::memory_order_relaxed) && fd != t_driver_fd) {
        WakeBatch::Current()->QueueFd(fd);
      }
      continue;
    }
    std::shared_ptr<FdHandler> h = it->second;  // survives Remove() inside the handler
    (*h)(events[i].events);
  }
}

void EventLoop::Kick() {
  // A polling thread (the loop thread or a driver) drains the queue before it
  // sleeps again; only a parked loop thread needs the other door.
  if (pollers_.load(std::memory_order_seq_cst) > 0) {
    uint64_t one = 1;
    sys::Write(wake_fd_, &one, sizeof(one));
  } else if (parked_.load(std::memory_order_seq_cst)) {
    std::lock_guard<std::mutex> lock(park_mu_);
    park_kick_ = true;
    park_cv_.notify_one();
  }
}

bool EventLoop::ShouldPark() {
  if (lease_ <= absl::ZeroDuration()) return false;
  if (driving_.load(std::memory_order_seq_cst)) return true;
  int64_t since = MonotonicNow() - last_drive_end_ns_.load(std::memory_order_relaxed);
  return last_drive_end_ns_.load(std::memory_order_relaxed) != 0 &&
         since < absl::ToInt64Nanoseconds(lease_);
}

void EventLoop::Park(absl::Time until) {
  std::unique_lock<std::mutex> lock(park_mu_);
  park_cv_.wait_until(lock, absl::ToChronoTime(until), [this] { return park_kick_; });
  park_kick_ = false;
}

void EventLoop::Run() {
  struct epoll_event events[kMaxEvents];
  int n = 0;
  absl::Duration park_for = lease_;
  uint64_t seen_sessions = 0;
  LockRun();
  while (!stop_.load(std::memory_order_relaxed)) {
    // Wake-ups of application threads wait until the run lock is released (waiter.h).
    WakeBatch wakes;
    RunRound(events, n);
    n = 0;
    if (deferred_.empty() && ShouldPark()) {
      // A driver polls (or did a moment ago, and probably will again): stay out of its way.
      const uint64_t sessions = drive_sessions_.load(std::memory_order_relaxed);
      if (driving_.load(std::memory_order_relaxed) && sessions == seen_sessions) {
        park_for = std::min(park_for * 2, absl::Milliseconds(64));  // one long session
      } else {
        park_for = lease_;
      }
      seen_sessions = sessions;
      absl::Time until = absl::Now() + park_for;
      int timer_ms = NextTimeoutMs();
      if (timer_ms >= 0) until = std::min(until, absl::Now() + absl::Milliseconds(timer_ms));
      long_park_.store(park_for > lease_, std::memory_order_seq_cst);
      parked_.store(true, std::memory_order_seq_cst);
      // Re-check after announcing the park (as before sleeping, below).
      const bool pending = TasksPending();
      UnlockRun(wakes);
      if (!pending) {
        Park(until);
        // While the same driver session lasts it serves everything (events,
        // tasks, timers): park on without taking the run lock, which would
        // only make the driver's next round — or an inline send — wait.
        // (long_park_ is announced before driving_ is read again: a driver
        // that returns meanwhile sees it and kicks.)
        for (;;) {
          park_for = std::min(park_for * 2, absl::Milliseconds(64));
          long_park_.store(true, std::memory_order_seq_cst);
          if (stop_.load(std::memory_order_relaxed) || !driving_.load(std::memory_order_seq_cst) ||
              drive_sessions_.load(std::memory_order_relaxed) != seen_sessions) {
            break;
          }
          if (TasksPending()) break;
          Park(absl::Now() + park_for);
        }
      }
      parked_.store(false, std::memory_order_seq_cst);
      long_park_.store(false, std::memory_order_relaxed);
      LockRun();
      continue;
    }
    park_for = lease_;
    int timeout = deferred_.empty() ? NextTimeoutMs() : 0;
    pollers_.fetch_add(1, std::memory_order_seq_cst);
    // Re-check after announcing sleep: a Post() that saw no poller did not
    // write the eventfd, so its task must be picked up now.
    if (TasksPending()) timeout = 0;
    UnlockRun(wakes);
    n = sys::EpollWait(epfd_, events, kMaxEvents, timeout);
    int err = errno;
    LockRun();
    pollers_.fetch_sub(1, std::memory_order_seq_cst);
    if (abandoned()) break;  // its fds may be the application's now
    if (n < 0) {
      if (err != EINTR) log::Error("epoll_wait: %s", strerror(err));
      n = 0;
    }
  }
  t_in_loop = false;
  run_mu_.Unlock();
}

bool EventLoop::BeginDriving(sigset_t* app_mask, stats::Counter counter) {
  // Signals wait until this thread sleeps in epoll_pwait or ppoll: a handler
  // must never run while this thread holds the run lock (or in the middle of
  // a handler).
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, app_mask);
  bool expected = false;
  if (!driving_.compare_exchange_strong(expected, true, std::memory_order_seq_cst)) {
    pthread_sigmask(SIG_SETMASK, app_mask, nullptr);
    return false;
  }
  // Whoever holds the run lock now (the loop thread in a round, a thread
  // sending inline) releases it soon and never waits for this thread.
  LockRun();
  drive_sessions_.fetch_add(1, std::memory_order_relaxed);
  stats::Inc(counter);
  return true;
}

void EventLoop::EndDriving(WakeBatch& wakes, const sigset_t& app_mask) {
  last_drive_end_ns_.store(MonotonicNow(), std::memory_order_relaxed);
  driving_.store(false, std::memory_order_seq_cst);
  // Work posted by this round's handlers (an urgent ack) that the parked
  // loop thread would otherwise leave for a lease.
  const bool pending = TasksPending();
  UnlockRun(wakes);
  // A session that outlived the loop thread's lease: it parked for longer, wake it now.
  if (pending || long_park_.load(std::memory_order_seq_cst)) Kick();
  pthread_sigmask(SIG_SETMASK, &app_mask, nullptr);
}

void EventLoop::RunRound(const struct epoll_event* events, int n) {
  Dispatch(events, n);
  DrainTasks();
  RunDueTimers();
  RunDeferred();
}

bool EventLoop::Drive(Waiter& waiter, std::optional<absl::Time> deadline, absl::Status* result) {
  return Drive(waiter, deadline, result, [] {}, [] {});
}

bool EventLoop::Drive(Waiter& waiter, std::optional<absl::Time> deadline, absl::Status* result,
                      absl::FunctionRef<void()> on_enter, absl::FunctionRef<void()> on_leave) {
  if (lease_ <= absl::ZeroDuration()) return false;
  const signals::Interrupted on_signal = signals::Policy();
  if (on_signal == signals::Interrupted::kMixed) return false;
  sigset_t app_mask;
  if (!BeginDriving(&app_mask, stats::kShimRecvWaitsDriven)) return false;
  on_enter();
  const int wfd = waiter.fd();
  bool registered = false;
  struct epoll_event events[kMaxEvents];
  // The first round does not sleep: for a receiver that finds data already
  // waiting in the link (a stream) that is the whole wait, with no set-up.
  int n = sys::EpollWait(epfd_, events, kMaxEvents, 0);
  if (n < 0) n = 0;
  WakeBatch wakes;
  for (;;) {
    RunRound(events, n);
    n = 0;
    if (waiter.TakeWake()) {
      *result = absl::OkStatus();
      break;
    }
    if (!registered) {
      // Its waiter's timerfd joins the set while it sleeps here, so that
      // another thread's Wake() (a delivery, a close) ends its epoll_wait
      // (a timerfd already readable is reported at once). Edge-triggered:
      // nobody reads it here.
      struct epoll_event wev = {};
      wev.events = EPOLLIN | EPOLLET;
      wev.data.fd = wfd;
      // (Still readable from a wake-up already consumed, the timerfd is
      // reported once at once; Dispatch ignores it on this thread.)
      t_driver_fd = wfd;
      sys::EpollCtl(epfd_, EPOLL_CTL_ADD, wfd, &wev);
      driver_fd_.store(wfd, std::memory_order_seq_cst);
      registered = true;
      NudgePoller();
    }
    int timeout = deferred_.empty() ? NextTimeoutMs() : 0;
    if (deadline) {
      absl::Duration left = *deadline - absl::Now();
      if (left <= absl::ZeroDuration()) {
        *result = RdsError(ETIMEDOUT);
        break;
      }
      int ms = static_cast<int>(
          std::min<int64_t>(absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))),
                            std::numeric_limits<int>::max()));
      timeout = timeout < 0 ? ms : std::min(timeout, ms);
    }
    pollers_.fetch_add(1, std::memory_order_seq_cst);
    if (TasksPending()) timeout = 0;
    UnlockRun(wakes);
    n = sys::EpollPwait(epfd_, events, kMaxEvents, timeout, &app_mask);
    int err = errno;
    LockRun();
    pollers_.fetch_sub(1, std::memory_order_seq_cst);
    if (abandoned() || (n < 0 && (err == EBADF || err == EINVAL))) {
      // The loop's fds were closed under it: this socket's engine is gone.
      n = 0;
      *result = RdsError(EBADF);
      break;
    }
    if (n < 0) {
      n = 0;
      if (err != EINTR) {
        log::Error("epoll_wait: %s", strerror(err));
        continue;
      }
      // A handler ran. Kernel RDS's wait returns -ERESTARTSYS (waiter.h).
      if (on_signal == signals::Interrupted::kEintr) {
        *result = RdsError(EINTR);
        break;
      }
    }
  }
  if (registered) {
    driver_fd_.store(-1, std::memory_order_seq_cst);
    t_driver_fd = -1;
    sys::EpollCtl(epfd_, EPOLL_CTL_DEL, wfd, nullptr);
  }
  on_leave();
  EndDriving(wakes, app_mask);
  return true;
}

std::optional<int> EventLoop::PollDriving(struct pollfd* fds, nfds_t n,
                                          const struct timespec* timeout, const sigset_t* mask,
                                          Waiter& waiter, stats::Counter counter) {
  if (lease_ <= absl::ZeroDuration()) return std::nullopt;
  std::optional<absl::Time> deadline;
  if (timeout != nullptr) deadline = absl::Now() + absl::DurationFromTimespec(*timeout);
  sigset_t app_mask;
  if (!BeginDriving(&app_mask, counter)) return std::nullopt;
  // poll and select are never restarted after a handler (signal(7)): the
  // mask they wait with is the caller's, whatever the handlers' flags.
  const sigset_t* wait_mask = mask != nullptr ? mask : &app_mask;
  // The caller's set, then the loop's epoll fd (readable while an event of
  // the loop is ready). The caller's waiter fd is among the former: another
  // thread's Wake() ends the ppoll through it.
  absl::InlinedVector<struct pollfd, 8> set(fds, fds + n);
  set.push_back({epfd_, POLLIN, 0});
  NudgePoller();
  struct epoll_event events[kMaxEvents];
  WakeBatch wakes;
  int ready = sys::EpollWait(epfd_, events, kMaxEvents, 0);
  RunRound(events, std::max(ready, 0));
  int result = 0;
  int err = 0;
  while (!waiter.TakeWake()) {  // woken by this thread: a socket of the caller's changed
    absl::Duration wait = absl::InfiniteDuration();
    const int timer_ms = deferred_.empty() ? NextTimeoutMs() : 0;
    if (timer_ms >= 0) wait = absl::Milliseconds(timer_ms);
    // At the deadline the caller's fds are still looked at, once.
    bool last = false;
    if (deadline) {
      absl::Duration left = std::max(*deadline - absl::Now(), absl::ZeroDuration());
      last = left == absl::ZeroDuration();
      wait = std::min(wait, left);
    }
    pollers_.fetch_add(1, std::memory_order_seq_cst);
    if (TasksPending()) wait = absl::ZeroDuration();
    struct timespec ts;
    if (wait != absl::InfiniteDuration()) ts = absl::ToTimespec(wait);
    UnlockRun(wakes);
    int r = sys::Ppoll(set.data(), set.size(), wait != absl::InfiniteDuration() ? &ts : nullptr,
                       wait_mask);
    err = errno;
    LockRun();
    pollers_.fetch_sub(1, std::memory_order_seq_cst);
    if (abandoned()) {
      // The loop's fds were closed under it: the caller looks at its
      // sockets again (they are orphaned now) and at its own fds.
      result = 0;
      break;
    }
    if (r < 0) {
      result = -1;  // EINTR (a handler ran), ENOMEM, or EINVAL (below)
      break;
    }
    // The loop's events are handled even when the caller's fds end the wait:
    // the parked loop thread would leave them for a lease.
    const bool loop_ready = set.back().revents != 0;
    ready = loop_ready ? sys::EpollWait(epfd_, events, kMaxEvents, 0) : 0;
    RunRound(events, std::max(ready, 0));
    if (r > (loop_ready ? 1 : 0)) {
      for (nfds_t i = 0; i < n; ++i) fds[i].revents = set[i].revents;
      result = r - (loop_ready ? 1 : 0);
      break;
    }
    if (last) break;
  }
  if (result == 0) {
    for (nfds_t i = 0; i < n; ++i) fds[i].revents = 0;
  }
  EndDriving(wakes, app_mask);
  // EINVAL may be the set's one extra entry (more than RLIMIT_NOFILE): the
  // caller's own ppoll decides.
  if (result < 0 && err == EINVAL) return std::nullopt;
  if (result < 0) errno = err;
  return result;
}

void EventLoop::Abandon() {
  abandoned_.store(true, std::memory_order_release);
  stop_.store(true);
  std::lock_guard<std::mutex> lock(park_mu_);
  park_kick_ = true;
  park_cv_.notify_one();
}

void EventLoop::Stop() {
  stop_.store(true);
  uint64_t one = 1;
  sys::Write(wake_fd_, &one, sizeof(one));
  std::lock_guard<std::mutex> lock(park_mu_);
  park_kick_ = true;
  park_cv_.notify_one();
}

}  // namespace rds
