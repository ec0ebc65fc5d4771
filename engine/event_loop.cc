// engine/event_loop.cc — epoll, timers and posted tasks.
#include "engine/event_loop.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <cstdint>

#include "absl/time/clock.h"
#include "engine/log.h"
#include "engine/sys.h"

namespace rds {

EventLoop::EventLoop() {
  epfd_ = sys::MakeInternal(epoll_create1(EPOLL_CLOEXEC));
  wake_fd_ = sys::MakeInternal(sys::EventFd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  struct epoll_event ev = {};
  ev.events = EPOLLIN;
  ev.data.fd = wake_fd_;
  epoll_ctl(epfd_, EPOLL_CTL_ADD, wake_fd_, &ev);
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
  if (epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    log::Error("epoll_ctl(ADD, %d): %s", fd, strerror(errno));
  }
}

void EventLoop::Modify(int fd, uint32_t events) {
  struct epoll_event ev = {};
  ev.events = events;
  ev.data.fd = fd;
  epoll_ctl(epfd_, EPOLL_CTL_MOD, fd, &ev);
}

void EventLoop::Remove(int fd) {
  epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
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
  if (was_empty && sleeping_.load(std::memory_order_seq_cst)) {
    uint64_t one = 1;
    sys::Write(wake_fd_, &one, sizeof(one));
  }
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

bool EventLoop::TryRunInline(absl::FunctionRef<bool()> fn) {
  if (!run_mu_.TryLock()) return false;
  bool idle;
  {
    rds::MutexLock lock(&task_mu_);
    idle = tasks_.empty();
  }
  const TimerId timers_before = next_timer_;
  bool done = idle && fn();
  if (done) RunDeferred();
  // A timer started here may be due before the sleeping loop's timeout.
  const bool wake = next_timer_ != timers_before && sleeping_.load(std::memory_order_seq_cst);
  run_mu_.Unlock();
  if (wake) {
    uint64_t one = 1;
    sys::Write(wake_fd_, &one, sizeof(one));
  }
  return done;
}

void EventLoop::Run() {
  constexpr int kMaxEvents = 64;
  struct epoll_event events[kMaxEvents];
  rds::MutexLock run(&run_mu_);
  while (!stop_.load(std::memory_order_relaxed)) {
    DrainTasks();
    RunDueTimers();
    RunDeferred();
    int timeout = deferred_.empty() ? NextTimeoutMs() : 0;
    sleeping_.store(true, std::memory_order_seq_cst);
    {
      // Re-check after announcing sleep: a Post() that saw sleeping_==false
      // did not write the eventfd, so its task must be picked up now.
      rds::MutexLock lock(&task_mu_);
      if (!tasks_.empty()) timeout = 0;
    }
    run_mu_.Unlock();
    int n = sys::EpollWait(epfd_, events, kMaxEvents, timeout);
    run_mu_.Lock();
    sleeping_.store(false, std::memory_order_seq_cst);
    if (n < 0) {
      if (errno != EINTR) log::Error("epoll_wait: %s", strerror(errno));
      continue;
    }
    for (int i = 0; i < n; ++i) {
      int fd = events[i].data.fd;
      if (fd == wake_fd_) {
        uint64_t v;
        sys::Read(wake_fd_, &v, sizeof(v));
        continue;
      }
      auto it = handlers_.find(fd);
      if (it == handlers_.end()) continue;
      std::shared_ptr<FdHandler> h = it->second;  // survives Remove() inside the handler
      (*h)(events[i].events);
    }
  }
}

void EventLoop::Stop() {
  stop_.store(true);
  uint64_t one = 1;
  sys::Write(wake_fd_, &one, sizeof(one));
}

}  // namespace rds
