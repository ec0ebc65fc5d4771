// engine/event_loop.h — the engine thread's epoll loop.
//
// Owns one epoll fd, a wake-up eventfd for tasks posted from other threads,
// and a timer heap. Fd handlers, timers and posted tasks run on the loop
// thread, which holds the loop's run lock except while it sleeps in
// epoll_wait. Another thread may take that lock while the loop sleeps and run
// work inline (TryRunInline): the send fast path, which then skips waking the
// loop thread.
//
// Driving (docs/perf/history.md): an application thread about to block in recvmsg
// becomes the loop for as long as it waits (Drive): it sleeps in
// epoll_wait on the loop's epoll set, with its Waiter's timerfd added, and
// handles whatever is ready itself — so an arriving message costs one wake-up
// (of the thread that wants it) instead of two (the loop thread's, then the
// reader's). A thread blocked in the interposed poll/select or in an epoll
// wait on a set holding an RDS socket drives the same way (PollDriving),
// sleeping in ppoll on its own fds plus the loop's epoll fd. Only one thread
// drives at a time. While a driver exists, and for a lease after
// the last one returned, the loop thread parks instead of polling, so that
// epoll's wake-ups go to the driver; a posted task ends the park at once, the
// lease ends it otherwise (a timer may therefore run up to one lease late while
// threads come and go). A park that outlives a lease doubles, up to 64 ms, and
// the driver whose session outlived it wakes the loop thread on return.
//
// Thread-safety: Post() and TryRunInline() are safe from any thread;
// everything else must be called with the run lock held (on the loop thread,
// or inside TryRunInline).
#ifndef RDS_ENGINE_EVENT_LOOP_H_
#define RDS_ENGINE_EVENT_LOOP_H_

#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <time.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <functional>
#include <queue>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/functional/function_ref.h"
#include "absl/time/time.h"
#include "engine/stats.h"
#include "engine/sync.h"

namespace rds {

class Waiter;
class WakeBatch;

class EventLoop {
 public:
  using FdHandler = std::function<void(uint32_t events)>;
  using Task = std::function<void()>;
  using TimerId = uint64_t;

  EventLoop();
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Loop thread only.
  void Add(int fd, uint32_t events, FdHandler handler);
  void Modify(int fd, uint32_t events);
  void Remove(int fd);
  TimerId After(absl::Duration delay, Task task);
  void Cancel(TimerId id);
  // Runs `task` once the loop has handled everything that is ready now (the posted tasks, due
  // timers and fd events of this round), before it sleeps again. Links use it to write many
  // messages per system call.
  void Defer(Task task);

  // Any thread: runs `task` on the loop thread, in posting order.
  void Post(Task task);

  // Any thread not holding the run lock: if the loop is asleep (or between
  // rounds) and no posted task is pending, runs `fn` on this thread with the
  // run lock held, then the work it deferred, and returns fn's result; false
  // otherwise (the caller Posts instead). `fn` returns false to decline, in
  // which case it must have changed nothing. Order is kept: work posted
  // earlier is never overtaken.
  bool TryRunInline(absl::FunctionRef<bool()> fn);

  // Any thread but the loop thread, with no locks held: waits for `waiter`
  // (as Waiter::Sleep does, with the same results and signal behaviour) while
  // running the loop. False if it cannot drive now (another thread drives,
  // the signal dispositions are mixed, driving is off); the caller then
  // sleeps normally.
  bool Drive(Waiter& waiter, std::optional<absl::Time> deadline, absl::Status* result);
  // The same, running `on_enter` once the run lock is first held and
  // `on_leave` just before it is last released (the drive's own set-up).
  bool Drive(Waiter& waiter, std::optional<absl::Time> deadline, absl::Status* result,
             absl::FunctionRef<void()> on_enter, absl::FunctionRef<void()> on_leave);

  // Any thread but the loop thread, with no locks held: ppoll(fds, n, timeout,
  // mask) with ppoll's results and signal behaviour (any handler ends it with
  // -1/EINTR; `mask` null: the thread's own mask while waiting), running the
  // loop meanwhile (the wait of the interposed poll, select and epoll waits).
  // `waiter` is the caller's (its fd among `fds` when other threads may wake
  // it): a wake-up of it that this thread causes itself while running the
  // loop ends the call at once with 0 and no revents set (the caller looks at
  // its RDS sockets again). nullopt if it cannot drive now (another thread
  // drives, driving is off: nothing done) or ppoll refused the set with its
  // one extra fd (EINVAL, as for more fds than RLIMIT_NOFILE): the caller then
  // polls by itself. `counter` counts the waits that drove.
  std::optional<int> PollDriving(struct pollfd* fds, nfds_t n, const struct timespec* timeout,
                                 const sigset_t* mask, Waiter& waiter, stats::Counter counter);

  // True on a thread that holds the run lock (the loop thread in a round, or a
  // thread running inline or driving).
  static bool InLoop();

  // Runs until Stop(); call on the loop thread.
  void Run();
  void Stop();
  // Any thread: the loop's fds were closed behind its back (sys::
  // InternalFdsLost). Its thread and drivers leave at their next wake-up
  // without touching an fd again (the numbers may be the application's now);
  // a waiting Drive returns EBADF. Nothing is woken through an fd.
  void Abandon();
  bool abandoned() const { return abandoned_.load(std::memory_order_acquire); }

  // Fork (engine/fork.h): waits up to `limit` for the round in progress to
  // end and keeps the next from starting, so that no round is half-way
  // through (an allocation, say) at the instant of fork. False if none ended
  // in time — its thread then waits for something the forking thread holds,
  // which is no hazard — or if the calling thread is in a round itself.
  bool HoldRoundsForFork(absl::Duration limit);
  // After fork, in the parent and the child, if HoldRoundsForFork held them.
  void ReleaseRoundsAfterFork();

 private:
  struct Timer {
    absl::Time when;
    TimerId id;
    bool operator>(const Timer& o) const { return when > o.when || (when == o.when && id > o.id); }
  };

  void Dispatch(const struct epoll_event* events, int n);
  // Drive's and PollDriving's common frame: block every signal and claim the
  // driver's role (false if another thread has it: the mask is restored),
  // then take the run lock; and the reverse.
  bool BeginDriving(sigset_t* app_mask, stats::Counter counter);
  void EndDriving(WakeBatch& wakes, const sigset_t& app_mask);
  // Posted tasks are queued.
  bool TasksPending();
  // The run lock with InLoop() kept true; UnlockRun then wakes what the
  // holder's WakeBatch collected (after the release, waiter.h).
  void LockRun() ABSL_EXCLUSIVE_LOCK_FUNCTION(run_mu_);
  void UnlockRun(WakeBatch& wakes) ABSL_UNLOCK_FUNCTION(run_mu_);
  // Makes a loop thread sleeping in epoll_wait look again (and park, now
  // that a thread drives).
  void NudgePoller();
  // One round of the loop's work, between two waits: the ready fds' handlers,
  // posted tasks, due timers, deferred work.
  void RunRound(const struct epoll_event* events, int n);
  bool ShouldPark();
  void Park(absl::Time until);
  void Kick();
  void DrainTasks();
  void RunDeferred();
  int NextTimeoutMs();
  void RunDueTimers();

  int epfd_;
  int wake_fd_;
  absl::flat_hash_map<int, std::shared_ptr<FdHandler>> handlers_;
  std::priority_queue<Timer, std::vector<Timer>, std::greater<Timer>> timer_heap_;
  absl::flat_hash_map<TimerId, Task> timers_;
  TimerId next_timer_ = 1;
  std::vector<Task> deferred_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> abandoned_{false};

  // Held by the loop thread except in epoll_wait (see TryRunInline).
  rds::Mutex run_mu_;
  rds::Mutex task_mu_;
  std::deque<Task> tasks_ ABSL_GUARDED_BY(task_mu_);
  // Threads that may be blocked in epoll_wait: Post() writes the eventfd only
  // then.
  std::atomic<int> pollers_{0};

  // Driving (see the top of this file).
  const absl::Duration lease_;
  std::atomic<bool> driving_{false};       // a thread is in Drive()
  std::atomic<int> driver_fd_{-1};         // its waiter's timerfd
  std::atomic<uint64_t> drive_sessions_{0};
  std::atomic<int64_t> last_drive_end_ns_{0};
  std::atomic<bool> parked_{false};        // the loop thread is parked (or about to be)
  std::atomic<bool> long_park_{false};     // ... for longer than a lease
  std::mutex park_mu_;
  std::condition_variable park_cv_;
  bool park_kick_ = false;  // guarded by park_mu_
};

}  // namespace rds

#endif  // RDS_ENGINE_EVENT_LOOP_H_
