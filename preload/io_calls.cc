// preload/io_calls.cc — interposed data-path entry points: the send and
// receive families, read/write, the fortified __*_chk variants, and the
// recognition of RDS fds passed over Unix sockets (SCM_RIGHTS).
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

#include <cstring>
#include <vector>

#include "absl/time/clock.h"
#include "engine/recv.h"
#include "engine/registry.h"
#include "engine/readiness.h"
#include "engine/send.h"
#include "engine/share.h"
#include "engine/socket.h"
#include "engine/usercopy.h"
#include "preload/errno_policy.h"
#include "preload/fd_table.h"
#include "preload/real.h"

using rds::RdsSocket;
using rds::preload::Fail;
using rds::preload::FdEntry;
using rds::preload::LookupForCall;
using rds::preload::Run;

extern "C" void __chk_fail(void) __attribute__((noreturn));

namespace {

ssize_t SendTo(const char* call, const FdEntry& e, const void* buf, size_t n, int flags, const sockaddr* to,
               socklen_t tolen) {
  iovec iov = {const_cast<void*>(buf), n};
  msghdr msg = {};
  msg.msg_name = const_cast<sockaddr*>(to);
  msg.msg_namelen = to ? tolen : 0;
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  return Run<ssize_t>(call, e, [&](RdsSocket& rs) { return rds::SendMsg(rs, msg, flags); });
}

ssize_t SendMsgUser(const char* call, const FdEntry& e, const msghdr* umsg, int flags) {
  return Run<ssize_t>(call, e, [&](RdsSocket& rs) -> absl::StatusOr<size_t> {
    msghdr msg;
    if (absl::Status s = rds::usercopy::FromUser(&msg, umsg, sizeof(msg)); !s.ok()) return s;
    return rds::SendMsg(rs, msg, flags);
  });
}

ssize_t RecvFrom(const char* call, int fd, const FdEntry& e, void* buf, size_t n, int flags, sockaddr* from,
                 socklen_t* fromlen) {
  return Run<ssize_t>(call, e, [&](RdsSocket& rs) -> absl::StatusOr<size_t> {
    iovec iov = {buf, n};
    msghdr msg = {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (from != nullptr) {
      int len = 0;
      if (absl::Status s = rds::usercopy::FromUser(&len, fromlen, sizeof(len)); !s.ok()) return s;
      if (len < 0) return rds::RdsError(EINVAL);
      msg.msg_name = from;
      msg.msg_namelen = static_cast<socklen_t>(len);
    }
    absl::StatusOr<size_t> r = rds::RecvMsg(rs, fd, msg, flags);
    if (r.ok() && from != nullptr) {
      int out = static_cast<int>(msg.msg_namelen);
      if (absl::Status s = rds::usercopy::ToUser(fromlen, &out, sizeof(out)); !s.ok()) return s;
    }
    return r;
  });
}

ssize_t RecvMsgUser(const char* call, int fd, const FdEntry& e, msghdr* umsg, int flags) {
  return Run<ssize_t>(call, e, [&](RdsSocket& rs) -> absl::StatusOr<size_t> {
    msghdr msg;
    if (absl::Status s = rds::usercopy::FromUser(&msg, umsg, sizeof(msg)); !s.ok()) return s;
    absl::StatusOr<size_t> r = rds::RecvMsg(rs, fd, msg, flags);
    if (!r.ok()) return r;
    // Written back as ___sys_recvmsg does: the name length only when a name
    // buffer was given, then the flags and the control bytes used.
    if (msg.msg_name != nullptr) {
      if (absl::Status s = rds::usercopy::ToUser(&umsg->msg_namelen, &msg.msg_namelen,
                                                 sizeof(msg.msg_namelen));
          !s.ok()) {
        return s;
      }
    }
    int out_flags = msg.msg_flags & ~static_cast<int>(0x80000000u);  // MSG_CMSG_COMPAT
    if (absl::Status s = rds::usercopy::ToUser(&umsg->msg_flags, &out_flags, sizeof(out_flags));
        !s.ok()) {
      return s;
    }
    if (absl::Status s = rds::usercopy::ToUser(&umsg->msg_controllen, &msg.msg_controllen,
                                               sizeof(msg.msg_controllen));
        !s.ok()) {
      return s;
    }
    return r;
  });
}

ssize_t ReadV(const char* call, int fd, const FdEntry& e, const iovec* iov, int n) {
  if (n < 0) return Fail<ssize_t>(EINVAL);
  msghdr msg = {};
  msg.msg_iov = const_cast<iovec*>(iov);
  msg.msg_iovlen = static_cast<size_t>(n);
  return Run<ssize_t>(call, e, [&](RdsSocket& rs) { return rds::RecvMsg(rs, fd, msg, 0); });
}

// Before an RDS fd leaves over SCM_RIGHTS: the receiver shares the socket
// from now on, so its release here parks it for the other holders
// (engine/share.h) — while in flight too, as the kernel keeps it alive.
void NoteOutgoingRdsFds(const msghdr* umsg) {
  if (!rds::preload::AnyRds() || umsg == nullptr) return;
  // Application memory: read it safely (the real call reports EFAULT).
  msghdr local;
  if (!rds::usercopy::FromUser(&local, umsg, sizeof(local)).ok()) return;
  if (local.msg_controllen == 0 || local.msg_control == nullptr || local.msg_controllen > 65536) {
    return;
  }
  std::vector<uint8_t> control(local.msg_controllen);
  if (!rds::usercopy::FromUser(control.data(), local.msg_control, control.size()).ok()) return;
  local.msg_control = control.data();
  const msghdr* msg = &local;
  for (cmsghdr* c = CMSG_FIRSTHDR(msg); c != nullptr; c = CMSG_NXTHDR(const_cast<msghdr*>(msg), c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      auto e = rds::preload::Lookup(fd);
      if (e && e->state == FdEntry::State::kOwned) rds::share::MarkShared(*e->socket, fd);
    }
  }
}

// After fds arrived over SCM_RIGHTS: note the RDS ones (adopted on first use).
void NoteIncomingRdsFds(const msghdr* msg) {
  if (msg == nullptr || msg->msg_controllen == 0 || msg->msg_control == nullptr) return;
  for (cmsghdr* c = CMSG_FIRSTHDR(msg); c != nullptr; c = CMSG_NXTHDR(const_cast<msghdr*>(msg), c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (rds::RecognizeBackingFd(fd)) {
        rds::preload::PublishPending(fd);
      } else if (rds::preload::MaybeRds(fd)) {
        rds::preload::Unpublish(fd);  // a stale entry for a reused number
      }
    }
  }
}

}  // namespace

extern "C" {

ssize_t send(int fd, const void* buf, size_t n, int flags) {
  auto e = LookupForCall(fd);
  if (!e) return rds::real::send(fd, buf, n, flags);
  return SendTo(__func__, *e, buf, n, flags, nullptr, 0);
}

ssize_t sendto(int fd, const void* buf, size_t n, int flags, const sockaddr* to, socklen_t len) {
  auto e = LookupForCall(fd);
  if (!e) return rds::real::sendto(fd, buf, n, flags, to, len);
  return SendTo(__func__, *e, buf, n, flags, to, len);
}

ssize_t sendmsg(int fd, const msghdr* msg, int flags) {
  auto e = LookupForCall(fd);
  if (!e) {
    NoteOutgoingRdsFds(msg);
    return rds::real::sendmsg(fd, msg, flags);
  }
  return SendMsgUser(__func__, *e, msg, flags);
}

int sendmmsg(int fd, mmsghdr* vec, unsigned int n, int flags) {
  auto e = LookupForCall(fd);
  if (!e) {
    for (unsigned int i = 0; i < n; ++i) NoteOutgoingRdsFds(&vec[i].msg_hdr);
    return rds::real::sendmmsg(fd, vec, n, flags);
  }
  n = std::min(n, 1024u);  // UIO_MAXIOV
  for (unsigned int i = 0; i < n; ++i) {
    ssize_t r = SendMsgUser(__func__, *e, &vec[i].msg_hdr, flags);
    if (r < 0) return i == 0 ? -1 : static_cast<int>(i);
    vec[i].msg_len = static_cast<unsigned int>(r);
  }
  return static_cast<int>(n);
}

// write(2) on a SOCK_SEQPACKET socket goes through sock_write_iter, which adds
// MSG_EOR; rds_sendmsg rejects that flag, so write and writev always fail
// with EOPNOTSUPP on an RDS socket.
ssize_t write(int fd, const void* buf, size_t n) {
  auto e = LookupForCall(fd);
  if (!e) return rds::real::write(fd, buf, n);
  return SendTo(__func__, *e, buf, n, MSG_EOR, nullptr, 0);
}

ssize_t writev(int fd, const iovec* iov, int n) {
  auto e = LookupForCall(fd);
  if (!e) return rds::real::writev(fd, iov, n);
  if (n < 0) return Fail<ssize_t>(EINVAL);
  msghdr msg = {};
  msg.msg_iov = const_cast<iovec*>(iov);
  msg.msg_iovlen = static_cast<size_t>(n);
  return Run<ssize_t>(__func__, *e, [&](RdsSocket& rs) { return rds::SendMsg(rs, msg, MSG_EOR); });
}

ssize_t recv(int fd, void* buf, size_t n, int flags) {
  auto e = LookupForCall(fd);
  if (!e) return rds::real::recv(fd, buf, n, flags);
  return RecvFrom(__func__, fd, *e, buf, n, flags, nullptr, nullptr);
}

ssize_t recvfrom(int fd, void* buf, size_t n, int flags, sockaddr* from, socklen_t* len) {
  auto e = LookupForCall(fd);
  if (!e) return rds::real::recvfrom(fd, buf, n, flags, from, len);
  return RecvFrom(__func__, fd, *e, buf, n, flags, from, len);
}

ssize_t recvmsg(int fd, msghdr* msg, int flags) {
  auto e = LookupForCall(fd);
  if (!e) {
    ssize_t r = rds::real::recvmsg(fd, msg, flags);
    if (r >= 0) NoteIncomingRdsFds(msg);
    return r;
  }
  return RecvMsgUser(__func__, fd, *e, msg, flags);
}

int recvmmsg(int fd, mmsghdr* vec, unsigned int n, int flags, struct timespec* timeout) {
  auto e = LookupForCall(fd);
  if (!e) {
    int r = rds::real::recvmmsg(fd, vec, n, flags, timeout);
    for (int i = 0; i < r; ++i) NoteIncomingRdsFds(&vec[i].msg_hdr);
    return r;
  }
  std::optional<absl::Time> deadline;
  if (timeout != nullptr) deadline = absl::Now() + absl::DurationFromTimespec(*timeout);
  unsigned int got = 0;
  n = std::min(n, 1024u);
  while (got < n) {
    ssize_t r = RecvMsgUser(__func__, fd, *e, &vec[got].msg_hdr, flags);
    if (r < 0) {
      if (got == 0) return -1;
      break;
    }
    vec[got].msg_len = static_cast<unsigned int>(r);
    ++got;
    if (flags & MSG_WAITFORONE) flags |= MSG_DONTWAIT;
    // As the kernel: the timeout is only checked after each message.
    if (deadline && absl::Now() >= *deadline) break;
  }
  return static_cast<int>(got);
}

ssize_t read(int fd, void* buf, size_t n) {
  auto e = LookupForCall(fd);
  if (!e) return rds::real::read(fd, buf, n);
  return RecvFrom(__func__, fd, *e, buf, n, 0, nullptr, nullptr);
}

ssize_t readv(int fd, const iovec* iov, int n) {
  auto e = LookupForCall(fd);
  if (!e) return rds::real::readv(fd, iov, n);
  return ReadV(__func__, fd, *e, iov, n);
}

ssize_t __recv_chk(int fd, void* buf, size_t n, size_t buflen, int flags) {
  auto e = LookupForCall(fd);
  if (!e) return rds::real::recv_chk(fd, buf, n, buflen, flags);
  if (n > buflen) __chk_fail();
  return RecvFrom(__func__, fd, *e, buf, n, flags, nullptr, nullptr);
}

ssize_t __recvfrom_chk(int fd, void* buf, size_t n, size_t buflen, int flags, sockaddr* from,
                       socklen_t* len) {
  auto e = LookupForCall(fd);
  if (!e) return rds::real::recvfrom_chk(fd, buf, n, buflen, flags, from, len);
  if (n > buflen) __chk_fail();
  return RecvFrom(__func__, fd, *e, buf, n, flags, from, len);
}

ssize_t __read_chk(int fd, void* buf, size_t n, size_t buflen) {
  auto e = LookupForCall(fd);
  if (!e) return rds::real::read_chk(fd, buf, n, buflen);
  if (n > buflen) __chk_fail();
  return RecvFrom(__func__, fd, *e, buf, n, 0, nullptr, nullptr);
}

}  // extern "C"
