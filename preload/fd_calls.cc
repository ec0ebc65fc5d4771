// preload/fd_calls.cc — interposed descriptor calls: close, close_range,
// closefrom, dup/dup2/dup3, fcntl, ioctl.
//
// Internal fds (the engine's own) are invisible to the application: closing
// or duplicating them fails with EBADF as if they were not open. dup2/dup3
// onto one succeeds, as the kernel's does, after the engine has given it up
// (preload/lifecycle.h: RecoverFromLostFds).
// In a vfork child (preload/lifecycle.h) every call here is only the system
// call: the table and the sockets in memory are the parent's.
// fcntl and fcntl64 are both defined here: without this, glibc's headers
// would rename fcntl to fcntl64 (large-file build) and the two would clash.
#undef _FILE_OFFSET_BITS
#include <fcntl.h>
#include <linux/close_range.h>
#include <stdarg.h>
#include <sys/ioctl.h>

#include <algorithm>
#include <vector>

#include "engine/socket.h"
#include "engine/sys.h"
#include "preload/errno_policy.h"
#include "preload/fd_table.h"
#include "preload/lifecycle.h"
#include "preload/real.h"
#include "preload/sdp_fds.h"

using rds::RdsSocket;
using rds::preload::Fail;
using rds::preload::FdEntry;
using rds::preload::Lookup;
using rds::preload::Run;

namespace {

// Drops one fd's reference; the last one closes the RDS socket (§A.10).
void DropEntry(const std::shared_ptr<const FdEntry>& e) {
  if (!e || e->state != FdEntry::State::kOwned) return;
  if (e->socket->fd_refs.fetch_sub(1) == 1) {
    int saved = errno;
    rds::Release(*e->socket);
    errno = saved;
  }
}

// Records that `newfd` now refers to what `oldfd`'s entry refers to.
void Duplicate(const std::shared_ptr<const FdEntry>& e, int newfd) {
  if (!e) return;
  if (e->state == FdEntry::State::kOwned) {
    rds::preload::Publish(newfd, e->socket);
  } else if (e->state == FdEntry::State::kPending) {
    rds::preload::PublishPending(newfd);
  } else {
    rds::preload::PublishOrphan(newfd);
  }
}

int CloseRangeImpl(unsigned int first, unsigned int last, int flags) {
  if (first > last) return Fail<int>(EINVAL);
  if ((flags & CLOSE_RANGE_CLOEXEC) || rds::preload::InVforkChild()) {
    return rds::real::close_range(first, last, flags);
  }
  rds::preload::sdp_fds::ForgetRange(first, last);
  // Close around the engine's fds.
  std::vector<unsigned int> internal;
  rds::sys::ForEachInternal([&](int fd) { internal.push_back(static_cast<unsigned int>(fd)); });
  std::vector<std::shared_ptr<const FdEntry>> dropped;
  if (rds::preload::AnyRds()) {
    unsigned int hi = std::min<unsigned int>(last, 1u << 22);
    for (unsigned int fd = first; fd <= hi; ++fd) {
      if (rds::preload::MaybeRds(static_cast<int>(fd))) {
        dropped.push_back(rds::preload::Unpublish(static_cast<int>(fd)));
      }
    }
  }
  unsigned int lo = first;
  int r = 0;
  for (unsigned int fd : internal) {  // ascending, all below 2^20
    if (fd < first || fd > last) continue;
    if (fd > lo) r |= rds::real::close_range(lo, fd - 1, flags);
    lo = fd + 1;
  }
  if (lo <= last) r |= rds::real::close_range(lo, last, flags);
  for (auto& e : dropped) DropEntry(e);
  return r == 0 ? 0 : -1;
}

}  // namespace

extern "C" {

int close(int fd) {
  if (rds::preload::sdp_fds::Any() && !rds::preload::InVforkChild()) {
    rds::preload::sdp_fds::Forget(fd);
  }
  const bool internal = rds::sys::IsInternal(fd);
  if (!internal && !rds::preload::MaybeRds(fd)) return rds::real::close(fd);
  if (rds::preload::InVforkChild()) return rds::real::close(fd);
  if (internal) return Fail<int>(EBADF);
  std::shared_ptr<const FdEntry> e = rds::preload::Unpublish(fd);
  int r = rds::real::close(fd);
  DropEntry(e);
  return r;
}

int close_range(unsigned int first, unsigned int last, int flags) {
  return CloseRangeImpl(first, last, flags);
}

void closefrom(int lowfd) {
  if (lowfd < 0) lowfd = 0;
  CloseRangeImpl(static_cast<unsigned int>(lowfd), ~0u, 0);
}

int dup(int fd) {
  if ((rds::sys::IsInternal(fd) || rds::preload::MaybeRds(fd)) && rds::preload::InVforkChild()) {
    return rds::real::dup(fd);
  }
  if (rds::sys::IsInternal(fd)) return Fail<int>(EBADF);
  auto e = Lookup(fd);
  int r = rds::real::dup(fd);
  if (r >= 0 && e) Duplicate(e, r);
  if (r >= 0 && !rds::preload::InVforkChild()) rds::preload::sdp_fds::Duplicate(fd, r);
  return r;
}

static int Dup2Impl(int oldfd, int newfd, int flags, bool three) {
  auto real = [&] {
    return three ? rds::real::dup3(oldfd, newfd, flags) : rds::real::dup2(oldfd, newfd);
  };
  const bool involved = rds::sys::IsInternal(oldfd) || rds::sys::IsInternal(newfd) ||
                        rds::preload::MaybeRds(oldfd) || rds::preload::MaybeRds(newfd);
  if (!involved) {
    const int r = real();
    // OpenJDK makes a TCP socket SDP by dup2 of an SDP socket over it.
    if (r >= 0 && !rds::preload::InVforkChild()) rds::preload::sdp_fds::Duplicate(oldfd, newfd);
    return r;
  }
  if (rds::preload::InVforkChild()) return real();
  if (rds::sys::IsInternal(oldfd)) return Fail<int>(EBADF);  // not open, for the application
  if (rds::sys::IsInternal(newfd)) {
    // The kernel lets any open number be replaced: the engine loses one of
    // its fds, so its state starts afresh first (preload/lifecycle.h).
    if (three && oldfd == newfd) return Fail<int>(EINVAL);
    if (rds::real::fcntl(oldfd, F_GETFD, 0) < 0) return -1;  // EBADF: nothing is replaced
    rds::preload::RecoverFromLostFds(newfd);
  }
  auto e = Lookup(oldfd);
  int r = real();
  if (r < 0 || oldfd == newfd) return r;
  rds::preload::sdp_fds::Duplicate(oldfd, newfd);
  std::shared_ptr<const FdEntry> replaced = rds::preload::Unpublish(newfd);
  Duplicate(e, newfd);
  DropEntry(replaced);
  return r;
}

int dup2(int oldfd, int newfd) { return Dup2Impl(oldfd, newfd, 0, false); }
int dup3(int oldfd, int newfd, int flags) { return Dup2Impl(oldfd, newfd, flags, true); }

static int FcntlImpl(int fd, int cmd, long arg) {
  const bool dups = cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC;
  if (dups && (rds::sys::IsInternal(fd) || rds::preload::MaybeRds(fd)) &&
      rds::preload::InVforkChild()) {
    return rds::real::fcntl(fd, cmd, arg);
  }
  if (rds::sys::IsInternal(fd)) return Fail<int>(EBADF);
  auto e = Lookup(fd);
  int r = rds::real::fcntl(fd, cmd, arg);
  if (r >= 0 && dups && !rds::preload::InVforkChild()) rds::preload::sdp_fds::Duplicate(fd, r);
  if (!e || r < 0) return r;
  if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) {
    Duplicate(e, r);
  } else if (cmd == F_SETFL && e->state == FdEntry::State::kOwned) {
    rds::MutexLock lock(&e->socket->mu);
    e->socket->nonblocking = (arg & O_NONBLOCK) != 0;
  }
  return r;
}

int fcntl(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  long arg = va_arg(ap, long);
  va_end(ap);
  return FcntlImpl(fd, cmd, arg);
}

int fcntl64(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  long arg = va_arg(ap, long);
  va_end(ap);
  return FcntlImpl(fd, cmd, arg);
}

int ioctl(int fd, unsigned long request, ...) {
  va_list ap;
  va_start(ap, request);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  auto e = Lookup(fd);
  if (!e) return rds::real::ioctl(fd, request, arg);
  return Run<int>(__func__, *e, [&](RdsSocket& rs) { return rds::Ioctl(rs, fd, request, arg); });
}

}  // extern "C"
