// sdp_relay/relay_loop.cc — see relay_loop.h.
#include "sdp_relay/relay_loop.h"

#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/log.h"
#include "engine/sys.h"

namespace rds::sdp {

absl::StatusOr<RelayLoop*> RelayLoop::Get() {
  // One per process: a fork child (no thread of the parent's runs in it)
  // starts its own at its first use.
  static std::mutex mu;
  static RelayLoop* loop = nullptr;
  static pid_t owner = 0;
  std::lock_guard<std::mutex> lock(mu);
  const pid_t pid = sys::GetPid();
  if (loop == nullptr || owner != pid) {
    auto* fresh = new RelayLoop();  // lives as long as the process
    if (absl::Status s = fresh->Start(); !s.ok()) {
      delete fresh;
      return s;
    }
    loop = fresh;
    owner = pid;
  }
  return loop;
}

absl::Status RelayLoop::Start() {
  epfd_ = sys::MakeInternal(epoll_create1(EPOLL_CLOEXEC));
  wake_fd_ = sys::MakeInternal(sys::EventFd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (epfd_ < 0 || wake_fd_ < 0) {
    return absl::ResourceExhaustedError(absl::StrCat("SDP relay loop: ", strerror(errno)));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wake_fd_;
  sys::EpollCtl(epfd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  // The thread takes no signal of the application's.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  std::thread t([this] { Run(); });
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  thread_id_ = t.get_id();
  t.detach();
  return absl::OkStatus();
}

absl::Status RelayLoop::Add(int fd, uint32_t events, Handler handler) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  if (sys::EpollCtl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    return absl::InternalError(absl::StrCat("epoll_ctl: ", strerror(errno)));
  }
  handlers_[fd] = std::make_shared<Handler>(std::move(handler));
  return absl::OkStatus();
}

void RelayLoop::Remove(int fd) {
  if (handlers_.erase(fd) > 0) sys::EpollCtl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
}

void RelayLoop::Post(Task task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
  }
  const uint64_t one = 1;
  sys::Write(wake_fd_, &one, sizeof one);
}

uint64_t RelayLoop::After(absl::Duration delay, Task task) {
  const uint64_t id = next_timer_++;
  const absl::Time at = absl::Now() + delay;
  timers_[id] = {at, std::move(task)};
  timer_order_.emplace(at, id);
  return id;
}

void RelayLoop::Cancel(uint64_t timer) { timers_.erase(timer); }

int RelayLoop::NextTimeoutMs() {
  while (!timer_order_.empty() && !timers_.contains(timer_order_.begin()->second)) {
    timer_order_.erase(timer_order_.begin());
  }
  if (timer_order_.empty()) return -1;
  const absl::Duration left = timer_order_.begin()->first - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))));
}

void RelayLoop::RunDue() {
  const absl::Time now = absl::Now();
  while (!timer_order_.empty() && timer_order_.begin()->first <= now) {
    const uint64_t id = timer_order_.begin()->second;
    timer_order_.erase(timer_order_.begin());
    auto it = timers_.find(id);
    if (it == timers_.end()) continue;
    Task task = std::move(it->second.second);
    timers_.erase(it);
    task();
  }
}

void RelayLoop::Run() {
  epoll_event events[64];
  for (;;) {
    const int n = sys::EpollWait(epfd_, events, 64, NextTimeoutMs());
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == wake_fd_) {
        uint64_t count;
        sys::Read(wake_fd_, &count, sizeof count);
        continue;
      }
      auto it = handlers_.find(fd);
      if (it == handlers_.end()) continue;
      std::shared_ptr<Handler> h = it->second;  // a handler may remove itself
      (*h)(events[i].events);
    }
    for (;;) {
      Task task;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (tasks_.empty()) break;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
    RunDue();
  }
}

}  // namespace rds::sdp
