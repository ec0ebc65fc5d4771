// preload/poll_calls.cc — poll, ppoll, select, pselect (and __poll_chk,
// __ppoll_chk) with the exact rds_poll mask for RDS fds (DESIGN.md §2.3).
//
// Calls with no RDS fd go straight to libc. Otherwise RDS fds are evaluated
// here, the rest by the kernel; to sleep, the thread registers its Waiter on
// every RDS socket in the set and polls the kernel fds plus its Waiter's
// timerfd, so any change of an RDS socket wakes it. While it sleeps it runs
// the engine's event loop itself when it can (Engine::PollDriving): a message
// arriving on a link then costs one wake-up, this thread's, instead of the
// engine thread's and then this one's (DESIGN.md §2.3).
#include <poll.h>
#include <signal.h>
#include <sys/select.h>

#include <optional>
#include <vector>

#include "absl/time/clock.h"
#include "engine/engine.h"
#include "engine/share.h"
#include "engine/socket.h"
#include "engine/usercopy.h"
#include "engine/waiter.h"
#include "preload/errno_policy.h"
#include "preload/fd_table.h"
#include "preload/real.h"

using rds::RdsSocket;
using rds::preload::FdEntry;

extern "C" void __chk_fail(void) __attribute__((noreturn));

namespace {

struct RdsPollFd {
  size_t index;
  std::shared_ptr<const FdEntry> entry;
};

short RdsRevents(const FdEntry& e, short events) {
  if (e.state != FdEntry::State::kOwned) return POLLERR;  // another process's socket
  return rds::PollMask(*e.socket) & (events | POLLERR | POLLHUP);
}

// The shared core. `timeout` null: infinite.
int PollCore(pollfd* fds, nfds_t n, const struct timespec* timeout, const sigset_t* mask) {
  std::vector<RdsPollFd> rds_fds;
  std::vector<nfds_t> others;  // the entries the kernel polls, by index in fds
  for (nfds_t i = 0; i < n; ++i) {
    if (rds::preload::MaybeRds(fds[i].fd)) {
      if (auto e = rds::preload::Lookup(fds[i].fd)) {
        rds_fds.push_back({i, std::move(e)});
        continue;
      }
    }
    others.push_back(i);
  }
  if (rds_fds.empty()) return rds::real::ppoll(fds, n, timeout, mask);

  std::optional<absl::Time> deadline;
  if (timeout != nullptr) deadline = absl::Now() + absl::DurationFromTimespec(*timeout);
  rds::Waiter& waiter = rds::Waiter::ForThisThread();
  // A socket owned by another process (engine/share.h) changes there: its
  // backing fd, readable while the owner has messages queued, is polled for
  // them; what else may change (send space, congestion) is looked at again
  // every 10 ms.
  size_t remotes = 0;
  bool remote_writes = false;
  for (const auto& r : rds_fds) {
    if (r.entry->state == FdEntry::State::kOwned && r.entry->socket->remote.load()) {
      ++remotes;
      if (fds[r.index].events & (POLLOUT | POLLWRNORM | POLLWRBAND)) remote_writes = true;
    }
  }
  // Never more entries than the caller's (RLIMIT_NOFILE bounds nfds): the RDS
  // ones are left out, our wake-up fd and remote sockets' backing fds added.
  std::vector<pollfd> kernel(others.size() + 2 * remotes + 1);
  int saved = errno;
  auto remote_count = [&rds_fds] {
    size_t n = 0;
    for (const auto& r : rds_fds) {
      if (r.entry->state == FdEntry::State::kOwned && r.entry->socket->remote.load()) ++n;
    }
    return n;
  };
  for (;;) {
    std::optional<rds::PollWatch> watch(std::in_place, waiter);
    for (auto& r : rds_fds) {
      if (r.entry->state == FdEntry::State::kOwned) watch->Add(*r.entry->socket);
    }
    const size_t remote_watched = remote_count();
    int ready = 0;
    for (auto& r : rds_fds) {
      fds[r.index].revents = RdsRevents(*r.entry, fds[r.index].events);
      if (fds[r.index].revents) ++ready;
    }
    // A remote socket this pass took over (its owner let go of it) is local
    // now but not watched (PollWatch skips remote ones): watch it again before
    // waiting, or a message delivered to it would not end this wait.
    if (ready == 0 && remote_count() != remote_watched) continue;
    // The kernel's view of everything else, plus our wake-up fd.
    nfds_t k = 0;
    for (nfds_t i : others) kernel[k++] = {fds[i].fd, fds[i].events, 0};
    for (const auto& r : rds_fds) {
      if (r.entry->state == FdEntry::State::kOwned && r.entry->socket->remote.load()) {
        // Readable while the owner has messages queued: watched only when
        // the caller waits for that (else it would spin while they are).
        if (fds[r.index].events & (POLLIN | POLLRDNORM)) kernel[k++] = {fds[r.index].fd, POLLIN, 0};
        // Ends if the owner dies: the socket is then taken over here.
        const int owner_link = rds::share::OwnerLinkFd(*r.entry->socket);
        if (owner_link >= 0) kernel[k++] = {owner_link, POLLIN, 0};
      }
    }
    kernel[k++] = {waiter.fd(), POLLIN, 0};
    struct timespec zero = {0, 0};
    struct timespec left;
    const struct timespec* wait = nullptr;
    if (ready > 0) {
      wait = &zero;
    } else if (deadline || remote_writes) {
      absl::Duration d = deadline ? std::max(*deadline - absl::Now(), absl::ZeroDuration())
                                  : absl::InfiniteDuration();
      if (remote_writes) d = std::min(d, absl::Milliseconds(10));
      left = absl::ToTimespec(d);
      wait = &left;
    }
    std::optional<int> driven;
    const bool blocks = wait == nullptr || wait->tv_sec > 0 || wait->tv_nsec > 0;
    rds::Engine* engine = blocks ? rds::Engine::IfRunning() : nullptr;
    if (engine != nullptr) {
      driven = engine->PollDriving(kernel.data(), k, wait, mask, waiter,
                                   rds::stats::kShimPollWaitsDriven);
    }
    int r = driven ? *driven : rds::real::ppoll(kernel.data(), k, wait, mask);
    int err = errno;
    watch.reset();
    if (r < 0) {
      errno = err;
      return -1;
    }
    for (size_t j = 0; j < others.size(); ++j) {
      fds[others[j]].revents = kernel[j].revents;
      if (kernel[j].revents) ++ready;
    }
    if (kernel[k - 1].revents) waiter.Reset();
    if (ready > 0) {
      errno = saved;
      return ready;
    }
    if (deadline && absl::Now() >= *deadline) {
      errno = saved;
      return 0;
    }
  }
}

// The application's pollfd array, copied in when it names an RDS fd.
// nullopt: no RDS fd, or unreadable memory (libc's poll then reports EFAULT).
std::optional<std::vector<pollfd>> CopyInIfRds(const pollfd* fds, nfds_t n) {
  if (!rds::preload::AnyRds() || n == 0 || n > (1u << 20)) return std::nullopt;
  std::vector<pollfd> local(n);
  if (!rds::usercopy::FromUser(local.data(), fds, n * sizeof(pollfd)).ok()) return std::nullopt;
  for (const pollfd& p : local) {
    if (rds::preload::MaybeRds(p.fd)) return local;
  }
  return std::nullopt;
}

int PollLocal(std::vector<pollfd>& local, pollfd* user, const struct timespec* timeout,
              const sigset_t* mask) {
  int r = PollCore(local.data(), local.size(), timeout, mask);
  if (r >= 0 && !rds::usercopy::ToUser(user, local.data(), local.size() * sizeof(pollfd)).ok()) {
    return rds::preload::Fail<int>(EFAULT);
  }
  return r;
}

// The three fd_sets, copied in (kernel: the first nfds bits, in longs).
struct FdSets {
  fd_set r, w, e;
};
std::optional<FdSets> CopySetsInIfRds(int nfds, fd_set* r, fd_set* w, fd_set* e) {
  if (!rds::preload::AnyRds() || nfds <= 0) return std::nullopt;
  int limit = std::min(nfds, FD_SETSIZE);
  size_t bytes = ((limit + 63) / 64) * 8;
  FdSets sets;
  FD_ZERO(&sets.r);
  FD_ZERO(&sets.w);
  FD_ZERO(&sets.e);
  for (auto [user, local] : {std::pair{r, &sets.r}, {w, &sets.w}, {e, &sets.e}}) {
    if (user && !rds::usercopy::FromUser(local, user, bytes).ok()) return std::nullopt;
  }
  for (int fd = 0; fd < limit; ++fd) {
    if ((r && FD_ISSET(fd, &sets.r)) || (w && FD_ISSET(fd, &sets.w)) ||
        (e && FD_ISSET(fd, &sets.e))) {
      if (rds::preload::MaybeRds(fd)) return sets;
    }
  }
  return std::nullopt;
}

bool CopySetsOut(int nfds, const FdSets& sets, fd_set* r, fd_set* w, fd_set* e) {
  size_t bytes = ((std::min(nfds, FD_SETSIZE) + 63) / 64) * 8;
  for (auto [user, local] : {std::pair{r, &sets.r}, {w, &sets.w}, {e, &sets.e}}) {
    if (user && !rds::usercopy::ToUser(user, local, bytes).ok()) return false;
  }
  return true;
}

// select() expressed as poll(), with the kernel's POLLIN_SET/POLLOUT_SET/POLLEX_SET.
int SelectCore(int nfds, fd_set* r, fd_set* w, fd_set* e, const struct timespec* timeout,
               const sigset_t* mask) {
  if (nfds < 0) return rds::preload::Fail<int>(EINVAL);
  std::vector<pollfd> fds;
  for (int fd = 0; fd < nfds && fd < FD_SETSIZE; ++fd) {
    short ev = 0;
    if (r && FD_ISSET(fd, r)) ev |= POLLIN;
    if (w && FD_ISSET(fd, w)) ev |= POLLOUT;
    if (e && FD_ISSET(fd, e)) ev |= POLLPRI;
    if (ev) fds.push_back({fd, ev, 0});
  }
  int n = PollCore(fds.data(), fds.size(), timeout, mask);
  if (n < 0) return -1;
  if (r) FD_ZERO(r);
  if (w) FD_ZERO(w);
  if (e) FD_ZERO(e);
  int count = 0;
  for (const pollfd& p : fds) {
    if (p.revents & POLLNVAL) return rds::preload::Fail<int>(EBADF);
    if (r && (p.events & POLLIN) && (p.revents & (POLLIN | POLLHUP | POLLERR))) {
      FD_SET(p.fd, r);
      ++count;
    }
    if (w && (p.events & POLLOUT) && (p.revents & (POLLOUT | POLLERR))) {
      FD_SET(p.fd, w);
      ++count;
    }
    if (e && (p.events & POLLPRI) && (p.revents & POLLPRI)) {
      FD_SET(p.fd, e);
      ++count;
    }
  }
  return count;
}

}  // namespace

// glibc declares poll's and ppoll's array write-only (__attr_access
// ((__write_only__, 1, 2)) in <sys/poll.h>), so g++ warns that the wrappers
// read it "uninitialised". The kernel reads fd and events from it; so do we.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

extern "C" {

int poll(pollfd* fds, nfds_t n, int timeout) {
  auto local = CopyInIfRds(fds, n);
  if (!local) return rds::real::poll(fds, n, timeout);
  struct timespec ts;
  if (timeout >= 0) ts = {timeout / 1000, (timeout % 1000) * 1000000L};
  return PollLocal(*local, fds, timeout >= 0 ? &ts : nullptr, nullptr);
}

int __poll_chk(pollfd* fds, nfds_t n, int timeout, size_t fdslen) {
  if (fdslen / sizeof(*fds) < n) __chk_fail();
  return poll(fds, n, timeout);
}

int ppoll(pollfd* fds, nfds_t n, const struct timespec* timeout, const sigset_t* mask) {
  auto local = CopyInIfRds(fds, n);
  if (!local) return rds::real::ppoll(fds, n, timeout, mask);
  struct timespec ts;
  if (timeout != nullptr) {
    if (!rds::usercopy::FromUser(&ts, timeout, sizeof(ts)).ok()) return rds::preload::Fail<int>(EFAULT);
    if (ts.tv_sec < 0 || ts.tv_nsec < 0 || ts.tv_nsec >= 1000000000L) {
      return rds::preload::Fail<int>(EINVAL);
    }
  }
  sigset_t set;
  if (mask != nullptr && !rds::usercopy::FromUser(&set, mask, sizeof(set)).ok()) {
    return rds::preload::Fail<int>(EFAULT);
  }
  return PollLocal(*local, fds, timeout ? &ts : nullptr, mask ? &set : nullptr);
}

#pragma GCC diagnostic pop

int __ppoll_chk(pollfd* fds, nfds_t n, const struct timespec* timeout, const sigset_t* mask,
                size_t fdslen) {
  if (fdslen / sizeof(*fds) < n) __chk_fail();
  return ppoll(fds, n, timeout, mask);
}

int select(int nfds, fd_set* r, fd_set* w, fd_set* e, struct timeval* timeout) {
  auto sets = CopySetsInIfRds(nfds, r, w, e);
  if (!sets) return rds::real::select(nfds, r, w, e, timeout);
  std::optional<absl::Time> deadline;
  struct timespec ts;
  if (timeout != nullptr) {
    struct timeval tv;
    if (!rds::usercopy::FromUser(&tv, timeout, sizeof(tv)).ok()) return rds::preload::Fail<int>(EFAULT);
    if (tv.tv_sec < 0 || tv.tv_usec < 0) return rds::preload::Fail<int>(EINVAL);
    ts = {tv.tv_sec, tv.tv_usec * 1000};
    deadline = absl::Now() + absl::DurationFromTimespec(ts);
  }
  int n = SelectCore(nfds, r ? &sets->r : nullptr, w ? &sets->w : nullptr, e ? &sets->e : nullptr,
                     timeout ? &ts : nullptr, nullptr);
  if (n >= 0 && !CopySetsOut(nfds, *sets, r, w, e)) return rds::preload::Fail<int>(EFAULT);
  if (timeout != nullptr) {  // Linux select reports the time left
    struct timeval left = absl::ToTimeval(std::max(*deadline - absl::Now(), absl::ZeroDuration()));
    rds::usercopy::ToUser(timeout, &left, sizeof(left)).IgnoreError();
  }
  return n;
}

int pselect(int nfds, fd_set* r, fd_set* w, fd_set* e, const struct timespec* timeout,
            const sigset_t* mask) {
  auto sets = CopySetsInIfRds(nfds, r, w, e);
  if (!sets) return rds::real::pselect(nfds, r, w, e, timeout, mask);
  struct timespec ts;
  if (timeout != nullptr && !rds::usercopy::FromUser(&ts, timeout, sizeof(ts)).ok()) {
    return rds::preload::Fail<int>(EFAULT);
  }
  sigset_t set;
  if (mask != nullptr && !rds::usercopy::FromUser(&set, mask, sizeof(set)).ok()) {
    return rds::preload::Fail<int>(EFAULT);
  }
  int n = SelectCore(nfds, r ? &sets->r : nullptr, w ? &sets->w : nullptr, e ? &sets->e : nullptr,
                     timeout ? &ts : nullptr, mask ? &set : nullptr);
  if (n >= 0 && !CopySetsOut(nfds, *sets, r, w, e)) return rds::preload::Fail<int>(EFAULT);
  return n;
}

}  // extern "C"
