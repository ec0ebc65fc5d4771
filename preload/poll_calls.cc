// preload/poll_calls.cc — poll, ppoll, select, pselect (and __poll_chk,
// __ppoll_chk) with the exact rds_poll mask for RDS fds (DESIGN.md §2.3).
//
// Calls with no RDS fd go straight to libc. Otherwise RDS fds are evaluated
// here, the rest by the kernel; to sleep, the thread registers its Waiter on
// every RDS socket in the set and polls the kernel fds plus its Waiter's
// eventfd, so any change of an RDS socket wakes it.
#include <poll.h>
#include <signal.h>
#include <sys/select.h>

#include <optional>
#include <vector>

#include "absl/time/clock.h"
#include "engine/socket.h"
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
  for (nfds_t i = 0; i < n; ++i) {
    if (!rds::preload::MaybeRds(fds[i].fd)) continue;
    if (auto e = rds::preload::Lookup(fds[i].fd)) rds_fds.push_back({i, std::move(e)});
  }
  if (rds_fds.empty()) return rds::real::ppoll(fds, n, timeout, mask);

  std::optional<absl::Time> deadline;
  if (timeout != nullptr) deadline = absl::Now() + absl::DurationFromTimespec(*timeout);
  rds::Waiter& waiter = rds::Waiter::ForThisThread();
  std::vector<pollfd> kernel(n + 1);
  int saved = errno;
  for (;;) {
    for (auto& r : rds_fds) {
      if (r.entry->state == FdEntry::State::kOwned) {
        absl::MutexLock lock(&r.entry->socket->mu);
        r.entry->socket->AddWaiterLocked(&waiter);
      }
    }
    int ready = 0;
    for (auto& r : rds_fds) {
      fds[r.index].revents = RdsRevents(*r.entry, fds[r.index].events);
      if (fds[r.index].revents) ++ready;
    }
    // The kernel's view of everything else, plus our wake-up fd.
    nfds_t k = 0;
    size_t next_rds = 0;
    for (nfds_t i = 0; i < n; ++i) {
      if (next_rds < rds_fds.size() && rds_fds[next_rds].index == i) {
        kernel[k++] = {-1, 0, 0};  // ignored by the kernel
        ++next_rds;
      } else {
        kernel[k++] = fds[i];
      }
    }
    kernel[k++] = {waiter.fd(), POLLIN, 0};
    struct timespec zero = {0, 0};
    struct timespec left;
    const struct timespec* wait = nullptr;
    if (ready > 0) {
      wait = &zero;
    } else if (deadline) {
      absl::Duration d = std::max(*deadline - absl::Now(), absl::ZeroDuration());
      left = absl::ToTimespec(d);
      wait = &left;
    }
    int r = rds::real::ppoll(kernel.data(), k, wait, mask);
    int err = errno;
    for (auto& rf : rds_fds) {
      if (rf.entry->state == FdEntry::State::kOwned) {
        absl::MutexLock lock(&rf.entry->socket->mu);
        rf.entry->socket->RemoveWaiterLocked(&waiter);
      }
    }
    if (r < 0) {
      errno = err;
      return -1;
    }
    next_rds = 0;
    for (nfds_t i = 0; i < n; ++i) {
      if (next_rds < rds_fds.size() && rds_fds[next_rds].index == i) {
        ++next_rds;
        continue;
      }
      fds[i].revents = kernel[i].revents;
      if (fds[i].revents) ++ready;
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

bool HasRdsFd(const pollfd* fds, nfds_t n) {
  if (!rds::preload::AnyRds()) return false;
  for (nfds_t i = 0; i < n; ++i) {
    if (rds::preload::MaybeRds(fds[i].fd)) return true;
  }
  return false;
}

bool HasRdsFdInSets(int nfds, fd_set* r, fd_set* w, fd_set* e) {
  if (!rds::preload::AnyRds()) return false;
  for (int fd = 0; fd < nfds && fd < FD_SETSIZE; ++fd) {
    if ((r && FD_ISSET(fd, r)) || (w && FD_ISSET(fd, w)) || (e && FD_ISSET(fd, e))) {
      if (rds::preload::MaybeRds(fd)) return true;
    }
  }
  return false;
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

extern "C" {

int poll(pollfd* fds, nfds_t n, int timeout) {
  if (!HasRdsFd(fds, n)) return rds::real::poll(fds, n, timeout);
  struct timespec ts;
  if (timeout >= 0) ts = {timeout / 1000, (timeout % 1000) * 1000000L};
  return PollCore(fds, n, timeout >= 0 ? &ts : nullptr, nullptr);
}

int __poll_chk(pollfd* fds, nfds_t n, int timeout, size_t fdslen) {
  if (fdslen / sizeof(*fds) < n) __chk_fail();
  return poll(fds, n, timeout);
}

int ppoll(pollfd* fds, nfds_t n, const struct timespec* timeout, const sigset_t* mask) {
  if (!HasRdsFd(fds, n)) return rds::real::ppoll(fds, n, timeout, mask);
  return PollCore(fds, n, timeout, mask);
}

int __ppoll_chk(pollfd* fds, nfds_t n, const struct timespec* timeout, const sigset_t* mask,
                size_t fdslen) {
  if (fdslen / sizeof(*fds) < n) __chk_fail();
  return ppoll(fds, n, timeout, mask);
}

int select(int nfds, fd_set* r, fd_set* w, fd_set* e, struct timeval* timeout) {
  if (!HasRdsFdInSets(nfds, r, w, e)) return rds::real::select(nfds, r, w, e, timeout);
  std::optional<absl::Time> deadline;
  struct timespec ts;
  if (timeout != nullptr) {
    if (timeout->tv_sec < 0 || timeout->tv_usec < 0) return rds::preload::Fail<int>(EINVAL);
    ts = {timeout->tv_sec, timeout->tv_usec * 1000};
    deadline = absl::Now() + absl::DurationFromTimespec(ts);
  }
  int n = SelectCore(nfds, r, w, e, timeout ? &ts : nullptr, nullptr);
  if (timeout != nullptr) {  // Linux select reports the time left
    *timeout = absl::ToTimeval(std::max(*deadline - absl::Now(), absl::ZeroDuration()));
  }
  return n;
}

int pselect(int nfds, fd_set* r, fd_set* w, fd_set* e, const struct timespec* timeout,
            const sigset_t* mask) {
  if (!HasRdsFdInSets(nfds, r, w, e)) return rds::real::pselect(nfds, r, w, e, timeout, mask);
  return SelectCore(nfds, r, w, e, timeout, mask);
}

}  // extern "C"
