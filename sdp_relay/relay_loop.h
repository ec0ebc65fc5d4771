// sdp_relay/relay_loop.h — the SDP relay thread's event loop: fds with
// handlers (epoll), tasks posted from other threads (an eventfd), timers. One
// per process, started at the first SDP connection over verbs; SDP needs none
// of the RDS engine's loop (driving, leases), so it has its own.
//
// Thread-safety: Post() and Running() from any thread; everything else on the
// loop's thread (handlers, tasks and timers run there).
#ifndef RDS_SDP_RELAY_RELAY_LOOP_H_
#define RDS_SDP_RELAY_RELAY_LOOP_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace rds::sdp {

class RelayLoop {
 public:
  using Handler = std::function<void(uint32_t events)>;
  using Task = std::function<void()>;

  // The process's loop, its thread started at first use; an error says why
  // it cannot run (no eventfd, epoll or thread).
  static absl::StatusOr<RelayLoop*> Get();

  // Watches `fd` for `events` (EPOLLIN, EPOLLOUT, EPOLLET…) until Remove.
  absl::Status Add(int fd, uint32_t events, Handler handler);
  void Remove(int fd);
  // Runs `task` on the loop's thread, soon.
  void Post(Task task);
  // Runs `task` on the loop's thread after `delay`; the id cancels it.
  uint64_t After(absl::Duration delay, Task task);
  void Cancel(uint64_t timer);
  bool InLoop() const { return std::this_thread::get_id() == thread_id_; }

  RelayLoop(const RelayLoop&) = delete;
  RelayLoop& operator=(const RelayLoop&) = delete;

 private:
  RelayLoop() = default;
  absl::Status Start();
  void Run();
  int NextTimeoutMs();
  void RunDue();

  int epfd_ = -1;
  int wake_fd_ = -1;
  std::thread::id thread_id_;
  absl::flat_hash_map<int, std::shared_ptr<Handler>> handlers_;
  std::multimap<absl::Time, uint64_t> timer_order_;
  absl::flat_hash_map<uint64_t, std::pair<absl::Time, Task>> timers_;
  uint64_t next_timer_ = 1;
  std::mutex mu_;
  std::deque<Task> tasks_;  // guarded by mu_
};

}  // namespace rds::sdp

#endif  // RDS_SDP_RELAY_RELAY_LOOP_H_
