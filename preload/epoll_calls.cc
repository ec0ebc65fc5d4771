// preload/epoll_calls.cc — epoll_ctl, epoll_wait, epoll_pwait, epoll_pwait2
// (DESIGN.md §2.3).
//
// epoll itself is the kernel's: an RDS fd is a real fd, readable exactly
// while a readiness token is queued on it. epoll_ctl marks the socket
// epoll-watched, so that the engine keeps those tokens, and notes the epoll
// set. A wait on a noted set that must block runs the engine's event loop
// meanwhile (Engine::PollDriving on the epoll fd): a message arriving for a
// socket in the set then costs one wake-up, this thread's, instead of the
// engine thread's and then this one's. The results, errors and signal
// behaviour are epoll_wait's own (never restarted: any handler gives EINTR).
#include <signal.h>
#include <sys/epoll.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <optional>

#include "absl/time/clock.h"
#include "engine/engine.h"
#include "engine/readiness.h"
#include "engine/usercopy.h"
#include "engine/waiter.h"
#include "preload/fd_table.h"
#include "preload/real.h"

using rds::preload::FdEntry;

namespace {

// The epoll sets an RDS socket was ever added to, by fd number. A set that
// later dropped its RDS sockets, or a number reused by another set, only
// costs that set's waits a needless drive: never a wrong result.
constexpr int kTrackedSets = 1 << 16;
std::atomic<uint64_t> g_sets[kTrackedSets / 64];
std::atomic<bool> g_large_set{false};  // one at or above kTrackedSets

void NoteSet(int epfd) {
  if (epfd < 0) return;
  if (epfd >= kTrackedSets) {
    g_large_set.store(true, std::memory_order_relaxed);
    return;
  }
  g_sets[epfd / 64].fetch_or(uint64_t{1} << (epfd % 64), std::memory_order_relaxed);
}

bool MayHoldRds(int epfd) {
  if (epfd < 0) return false;
  if (epfd >= kTrackedSets) return g_large_set.load(std::memory_order_relaxed);
  return (g_sets[epfd / 64].load(std::memory_order_relaxed) >> (epfd % 64)) & 1;
}

// The common wait. `timeout` null: infinite; `mask` null: the thread's own.
// `ns_timeout`: the caller used epoll_pwait2 (kernels before 5.11 lack it; the
// others are served by epoll_pwait).
int Wait(rds::Engine& engine, int epfd, epoll_event* events, int max,
         const struct timespec* timeout, const sigset_t* mask, bool ns_timeout) {
  std::optional<absl::Time> deadline;
  if (timeout != nullptr) deadline = absl::Now() + absl::DurationFromTimespec(*timeout);
  rds::Waiter& waiter = rds::Waiter::ForThisThread();
  for (;;) {
    // What is ready now (and every argument error, at once, as epoll_wait
    // reports it).
    int n = rds::real::epoll_wait(epfd, events, max, 0);
    if (n != 0) return n;
    struct timespec left;
    const struct timespec* wait = nullptr;
    if (deadline) {
      absl::Duration d = *deadline - absl::Now();
      if (d <= absl::ZeroDuration()) return 0;
      left = absl::ToTimespec(d);
      wait = &left;
    }
    struct pollfd set = {epfd, POLLIN, 0};
    std::optional<int> r =
        engine.PollDriving(&set, 1, wait, mask, waiter, rds::stats::kShimEpollWaitsDriven);
    // Another thread drives: wait as the application asked.
    if (!r) {
      if (ns_timeout) return rds::real::epoll_pwait2(epfd, events, max, wait, mask);
      int ms = -1;
      if (wait != nullptr) {
        ms = static_cast<int>(std::min<int64_t>(
            absl::ToInt64Milliseconds(absl::Ceil(absl::DurationFromTimespec(*wait),
                                                 absl::Milliseconds(1))),
            std::numeric_limits<int>::max()));
      }
      return rds::real::epoll_pwait(epfd, events, max, ms, mask);
    }
    if (*r < 0) return -1;  // a handler ran (EINTR)
    // Readable (the events may yet go to another thread waiting on the same
    // set), the deadline, or a wake-up of this thread's waiter: look again.
  }
}

std::optional<struct timespec> FromMs(int timeout_ms) {
  if (timeout_ms < 0) return std::nullopt;
  return timespec{timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
}

// The engine to drive for a blocking wait on `epfd`, or null: the set never
// held an RDS socket, or this process has no engine (a fork child whose
// inherited sets hold its parent's sockets, orphaned here).
rds::Engine* Drives(int epfd, bool blocking) {
  if (!blocking || !rds::preload::AnyRds() || !MayHoldRds(epfd)) return nullptr;
  return rds::Engine::IfRunning();
}

}  // namespace

extern "C" {

int epoll_ctl(int epfd, int op, int fd, epoll_event* ev) {
  int r = rds::real::epoll_ctl(epfd, op, fd, ev);
  if (r == 0 && (op == EPOLL_CTL_ADD || op == EPOLL_CTL_MOD)) {
    auto e = rds::preload::Lookup(fd);
    if (e && e->state == FdEntry::State::kOwned) {
      if (!rds::WatchWithEpoll(*e->socket, fd)) {
        // Without its token sender the socket would never be reported:
        // refuse, as the kernel does when it cannot allocate the watch.
        if (op == EPOLL_CTL_ADD) rds::real::epoll_ctl(epfd, EPOLL_CTL_DEL, fd, nullptr);
        errno = ENOMEM;
        return -1;
      }
      NoteSet(epfd);
    }
  }
  return r;
}

int epoll_wait(int epfd, epoll_event* events, int max, int timeout) {
  rds::Engine* engine = Drives(epfd, timeout != 0);
  if (engine == nullptr) return rds::real::epoll_wait(epfd, events, max, timeout);
  std::optional<struct timespec> ts = FromMs(timeout);
  return Wait(*engine, epfd, events, max, ts ? &*ts : nullptr, nullptr, /*ns_timeout=*/false);
}

int epoll_pwait(int epfd, epoll_event* events, int max, int timeout, const sigset_t* mask) {
  rds::Engine* engine = Drives(epfd, timeout != 0);
  if (engine == nullptr) return rds::real::epoll_pwait(epfd, events, max, timeout, mask);
  std::optional<struct timespec> ts = FromMs(timeout);
  return Wait(*engine, epfd, events, max, ts ? &*ts : nullptr, mask, /*ns_timeout=*/false);
}

int epoll_pwait2(int epfd, epoll_event* events, int max, const struct timespec* timeout,
                 const sigset_t* mask) {
  // The timeout is read as the kernel would (unreadable: EFAULT; out of range:
  // EINVAL — both left to the kernel's own call).
  struct timespec ts;
  if (timeout != nullptr && (!rds::usercopy::FromUser(&ts, timeout, sizeof(ts)).ok() ||
                             ts.tv_sec < 0 || ts.tv_nsec < 0 || ts.tv_nsec >= 1000000000L)) {
    return rds::real::epoll_pwait2(epfd, events, max, timeout, mask);
  }
  const bool blocking = timeout == nullptr || ts.tv_sec != 0 || ts.tv_nsec != 0;
  rds::Engine* engine = Drives(epfd, blocking);
  if (engine == nullptr) return rds::real::epoll_pwait2(epfd, events, max, timeout, mask);
  return Wait(*engine, epfd, events, max, timeout != nullptr ? &ts : nullptr, mask,
              /*ns_timeout=*/true);
}

}  // extern "C"
