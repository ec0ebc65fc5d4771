// engine/event_loop.h — the engine thread's epoll loop.
//
// Owns one epoll fd, a wake-up eventfd for tasks posted from other threads,
// and a timer heap. Fd handlers and timers run on the loop thread only.
//
// Thread-safety: Post() and Wake() are safe from any thread; everything else
// must be called on the loop thread (or before Run()).
#ifndef RDS_ENGINE_EVENT_LOOP_H_
#define RDS_ENGINE_EVENT_LOOP_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <queue>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/sync.h"
#include "absl/time/time.h"

namespace rds {

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

  // Runs until Stop(); call on the loop thread.
  void Run();
  void Stop();

 private:
  struct Timer {
    absl::Time when;
    TimerId id;
    bool operator>(const Timer& o) const { return when > o.when || (when == o.when && id > o.id); }
  };

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

  rds::Mutex task_mu_;
  std::deque<Task> tasks_ ABSL_GUARDED_BY(task_mu_);
  // True while the loop thread may be blocked in epoll_wait: Post() writes
  // the eventfd only then.
  std::atomic<bool> sleeping_{false};
};

}  // namespace rds

#endif  // RDS_ENGINE_EVENT_LOOP_H_
