// engine/share_server.cc — the owner's side of socket sharing (engine/share.h):
// one thread per process, started by the first process that asks, runs the
// calls other processes forward on this process's sockets.
//
// Each call runs as the same call made by one of this process's threads
// would, but never blocks (MSG_DONTWAIT): the caller waits in its own
// process. A connection starts with the caller's copy of the backing fd
// (SCM_RIGHTS), which this process keeps while it serves the socket: the
// receive path drains readiness tokens there, and readiness is kept on it for
// as long as the socket is served.
#include <linux/rds.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <cerrno>
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/abandon.h"
#include "engine/bind.h"
#include "engine/bytes.h"
#include "engine/errors.h"
#include "engine/log.h"
#include "engine/readiness.h"
#include "engine/recv.h"
#include "engine/send.h"
#include "engine/share.h"
#include "engine/share_internal.h"
#include "engine/share_wire.h"
#include "engine/socket.h"
#include "engine/sockopt.h"
#include "engine/sync.h"
#include "engine/sys.h"

namespace rds::share {
namespace {

// Control messages whose pointers name the sending process's memory (an RDMA
// operation's local vectors and result, a region to register): the owner of a
// shared socket cannot act on them in its own address space.
bool NamesSendersMemory(msghdr& msg) {
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_RDS) continue;
    switch (c->cmsg_type) {
      case RDS_CMSG_RDMA_ARGS:
      case RDS_CMSG_RDMA_MAP:
      case RDS_CMSG_ATOMIC_CSWP:
      case RDS_CMSG_ATOMIC_FADD:
      case RDS_CMSG_MASKED_ATOMIC_CSWP:
      case RDS_CMSG_MASKED_ATOMIC_FADD:
        return true;
      default:
        break;
    }
  }
  return false;
}

using share_wire::Op;
using share_wire::Reply;
using share_wire::Request;

struct Conn {
  int fd;
  std::shared_ptr<RdsSocket> rs;
  bool introduced = false;  // its backing fd arrived
};

struct Server {
  // Held by the server thread except while it polls: fork holds it so that
  // the thread is never half-way through a round at the instant of fork
  // (HoldServerForFork).
  rds::Mutex mu;
  std::vector<Conn> conns ABSL_GUARDED_BY(mu);
  // Connections the engine thread handed over, taken into `conns` by the
  // server thread: the engine thread never waits for a call to end (a call
  // may wait for the engine thread, e.g. RDS_INFO).
  rds::Mutex pending_mu;
  std::vector<Conn> pending ABSL_GUARDED_BY(pending_mu);
  bool started ABSL_GUARDED_BY(pending_mu) = false;
  int wake = -1;  // eventfd: work arrived; set once when the thread starts
  // The server thread's poll set (here rather than on its stack: the thread
  // never ends, and a leak checker at exit may not see its stack).
  std::vector<pollfd> poll_fds;
  // Fork child or lost fds (engine/fork.h): the thread leaves at its next
  // wake-up without touching an fd.
  std::atomic<bool> abandoned{false};
  rds::Notification running;  // the thread runs its own code
};

Server* server = new Server();

int64_t ResultOf(const absl::Status& s, int64_t value) { return s.ok() ? value : -ErrnoOf(s); }

std::vector<uint8_t> Blob(const void* p, size_t n) {
  auto* b = static_cast<const uint8_t*>(p);
  return std::vector<uint8_t>(b, b + n);
}

const std::vector<uint8_t>& BlobAt(const Request& q, size_t i) {
  static const std::vector<uint8_t> kEmpty;
  return i < q.blobs.size() ? q.blobs[i] : kEmpty;
}

Reply Execute(RdsSocket& rs, int fd, const Request& q) {
  Reply p;
  switch (q.op) {
    case Op::kSend: {
      const std::vector<uint8_t>& name = BlobAt(q, 0);
      const std::vector<uint8_t>& data = BlobAt(q, 1);
      const std::vector<uint8_t>& control = BlobAt(q, 2);
      iovec iov = {const_cast<uint8_t*>(data.data()), data.size()};
      msghdr msg = {};
      msg.msg_name = name.empty() ? nullptr : const_cast<uint8_t*>(name.data());
      msg.msg_namelen = static_cast<socklen_t>(name.size());
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control.empty() ? nullptr : const_cast<uint8_t*>(control.data());
      msg.msg_controllen = control.size();
      if (NamesSendersMemory(msg)) {
        static std::atomic<bool> said{false};
        if (!said.exchange(true)) {
          log::Warn("an RDMA operation or region on a socket another process owns (inherited or "
                    "passed): only the owning process can do it (EOPNOTSUPP)");
        }
        p.result = -EOPNOTSUPP;
        return p;
      }
      absl::StatusOr<size_t> r = rds::SendMsg(rs, msg, q.arg[0] | MSG_DONTWAIT);
      p.result = ResultOf(r.status(), r.ok() ? static_cast<int64_t>(*r) : 0);
      rds::MutexLock lock(&rs.mu);
      p.timeout_us = share_wire::DurationToMicros(rs.sndtimeo);
      return p;
    }
    case Op::kRecv: {
      const size_t room = static_cast<size_t>(std::max(q.arg[1], 0));
      const size_t name_room = std::min<size_t>(std::max(q.arg[2], 0), sizeof(sockaddr_storage));
      const size_t control_room = std::min<size_t>(std::max(q.arg[3], 0), 65536);
      std::vector<uint8_t> data(room);
      sockaddr_storage name = {};
      std::vector<uint8_t> control(control_room);
      iovec iov = {data.data(), data.size()};
      msghdr msg = {};
      msg.msg_name = name_room ? &name : nullptr;
      msg.msg_namelen = static_cast<socklen_t>(name_room);
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control_room ? control.data() : nullptr;
      msg.msg_controllen = control_room;
      absl::StatusOr<size_t> r = rds::RecvMsg(rs, fd, msg, q.arg[0] | MSG_DONTWAIT);
      p.result = ResultOf(r.status(), r.ok() ? static_cast<int64_t>(*r) : 0);
      if (r.ok()) {
        p.out[0] = msg.msg_flags;
        p.out[1] = static_cast<int32_t>(msg.msg_namelen);
        p.out[2] = static_cast<int32_t>(msg.msg_controllen);
        data.resize(std::min(room, *r));
        p.blobs.push_back(std::move(data));
        p.blobs.push_back(Blob(&name, std::min<size_t>(msg.msg_namelen, name_room)));
        control.resize(std::min<size_t>(msg.msg_controllen, control_room));
        p.blobs.push_back(std::move(control));
      }
      rds::MutexLock lock(&rs.mu);
      p.timeout_us = share_wire::DurationToMicros(rs.rcvtimeo);
      return p;
    }
    case Op::kBind:
    case Op::kConnect: {
      const std::vector<uint8_t>& a = BlobAt(q, 0);
      const auto* addr = reinterpret_cast<const sockaddr*>(a.data());
      const auto len = static_cast<socklen_t>(a.size());
      absl::Status s = q.op == Op::kBind ? rds::Bind(rs, addr, len) : rds::Connect(rs, addr, len);
      p.result = ResultOf(s, 0);
      return p;
    }
    case Op::kGetName: {
      sockaddr_storage ss;
      absl::StatusOr<socklen_t> r = rds::GetName(rs, q.arg[0] != 0, &ss);
      p.result = ResultOf(r.status(), 0);
      if (r.ok()) p.blobs.push_back(Blob(&ss, *r));
      return p;
    }
    case Op::kSetOpt: {
      const std::vector<uint8_t>& v = BlobAt(q, 0);
      absl::Status s = rds::SetSockOpt(rs, fd, q.arg[0], q.arg[1], v.empty() ? nullptr : v.data(),
                                  static_cast<socklen_t>(v.size()));
      p.result = ResultOf(s, 0);
      return p;
    }
    case Op::kGetOpt: {
      const size_t room = std::min<size_t>(std::max(q.arg[2], 0), share_wire::kMaxFrame / 2);
      std::vector<uint8_t> v(room);
      socklen_t len = static_cast<socklen_t>(room);
      absl::StatusOr<int> r = rds::GetSockOpt(rs, fd, q.arg[0], q.arg[1], v.data(), &len);
      p.result = ResultOf(r.status(), r.ok() ? *r : 0);
      p.out[0] = static_cast<int32_t>(len);
      v.resize(std::min<size_t>(len, room));
      p.blobs.push_back(std::move(v));
      return p;
    }
    case Op::kPoll:
      p.result = static_cast<uint16_t>(rds::PollMask(rs));
      return p;
    case Op::kIoctl: {
      std::vector<uint8_t> arg = BlobAt(q, 0);
      arg.resize(std::max<size_t>(arg.size(), sizeof(int)));
      absl::StatusOr<int> r = rds::Ioctl(rs, fd, static_cast<unsigned long>(q.arg[0]), arg.data());
      p.result = ResultOf(r.status(), r.ok() ? *r : 0);
      p.blobs.push_back(std::move(arg));
      return p;
    }
  }
  p.result = -EINVAL;
  return p;
}

// The first message of a connection: one byte with the caller's backing fd.
bool Introduce(Conn& c) {
  char b;
  iovec iov = {&b, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t r = sys::Recvmsg(c.fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (r < 0 && (errno == EAGAIN || errno == EINTR)) return true;  // not yet
  cmsghdr* cm = r == 1 ? CMSG_FIRSTHDR(&msg) : nullptr;
  if (cm == nullptr || cm->cmsg_type != SCM_RIGHTS || cm->cmsg_len != CMSG_LEN(sizeof(int))) {
    return false;
  }
  int fd;
  std::memcpy(&fd, CMSG_DATA(cm), sizeof(int));
  if (RecognizeBackingFd(fd) != c.rs->id) {
    sys::Close(fd);
    return false;
  }
  // The first copy is kept while the socket is shared (engine/share.h), and
  // the caller waits for readiness on the backing fd.
  internal::KeepSharedFd(*c.rs, sys::MakeInternal(fd));
  if (!StartReadinessTokens(*c.rs)) return false;
  c.introduced = true;
  // The answer: 'A', then the socket's binding, with a descriptor of the
  // open-file lock that holds its port (internal::SharePort), so that the
  // binding outlives this process should it be killed.
  std::optional<RdsEndpoint> bound;
  const int port_fd = internal::SharePort(*c.rs);
  {
    rds::MutexLock lock(&c.rs->mu);
    bound = c.rs->bound;
  }
  bytes::Writer w;
  w.U8('A');
  w.U8(bound.has_value());
  if (bound) {
    w.Addr(bound->addr);
    w.U16(bound->port);
  }
  std::vector<uint8_t> ack = w.Take();
  iovec out = {ack.data(), ack.size()};
  return sys::SendmsgPassingFd(c.fd, &out, 1, bound ? port_fd : -1, MSG_NOSIGNAL) ==
         static_cast<ssize_t>(ack.size());
}

void DropConn(Server* self, size_t i) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu) {
  sys::CloseInternal(self->conns[i].fd);
  self->conns[i] = std::move(self->conns.back());
  self->conns.pop_back();
}

// Runs one call arriving on connection `fd`; drops the connection when it
// ends or misbehaves.
void HandleReadable(Server* self, int fd) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu) {
  size_t i = 0;
  while (i < self->conns.size() && self->conns[i].fd != fd) ++i;
  if (i == self->conns.size()) return;  // dropped meanwhile
  Conn& c = self->conns[i];
  bool released;
  {
    rds::MutexLock lock(&c.rs->mu);
    released = c.rs->released;
  }
  if (released) {
    // Parked (or closed) since this caller attached — possibly in the window
    // between Park's StopServing and the socket's release, when the caller
    // reconnected at once: it must look for the socket again (its next owner
    // takes it over), not be told EBADF, which ends the process's socket.
    DropConn(self, i);
    return;
  }
  bool ok;
  if (!c.introduced) {
    ok = Introduce(c);
  } else {
    // A frame comes whole from a caller waiting for its answer; one that
    // stalls half-way (a stopped process) is dropped after the socket's
    // receive timeout (ServeClient), not waited for.
    absl::StatusOr<std::vector<uint8_t>> body = share_wire::ReadFrame(c.fd);
    absl::StatusOr<Request> q = body.ok() ? share_wire::DecodeRequest(*body)
                                          : absl::StatusOr<Request>(body.status());
    ok = q.ok();
    if (ok) {
      int shared_fd;
      {
        rds::MutexLock lock(&c.rs->mu);
        shared_fd = c.rs->shared_fd;
      }
      ok = share_wire::WriteFrame(c.fd, share_wire::EncodeReply(Execute(*c.rs, shared_fd, *q))).ok();
    }
  }
  if (!ok) DropConn(self, i);
}

void Run(Server* self) {
  std::vector<pollfd>& fds = self->poll_fds;
  self->running.Notify();
  for (;;) {
    if (self->abandoned.load()) return;
    {
      rds::MutexLock lock(&self->mu);
      std::vector<Conn> arrived;
      {
        rds::MutexLock pending_lock(&self->pending_mu);
        arrived.swap(self->pending);
      }
      for (Conn& c : arrived) self->conns.push_back(std::move(c));
      fds.clear();
      fds.push_back({self->wake, POLLIN, 0});
      for (const Conn& c : self->conns) fds.push_back({c.fd, POLLIN, 0});
    }
    if (sys::Poll(fds.data(), fds.size(), -1) < 0) continue;
    if (self->abandoned.load()) return;
    rds::MutexLock lock(&self->mu);
    if (fds[0].revents) {
      uint64_t n;
      (void)sys::Read(fds[0].fd, &n, sizeof(n));
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents != 0) HandleReadable(self, fds[i].fd);
    }
  }
}

void Wake(Server* self) {
  uint64_t one = 1;
  if (self->wake >= 0) (void)sys::Write(self->wake, &one, sizeof(one));
}

}  // namespace

void ServeClient(uint64_t id, int conn) {
  std::shared_ptr<RdsSocket> rs;
  for (std::shared_ptr<RdsSocket>& s : AllLiveSockets()) {
    if (s->id == id && !s->remote.load()) rs = std::move(s);
  }
  if (!rs) {
    // Parked or closed meanwhile: the caller looks for the socket again.
    sys::CloseInternal(conn);
    return;
  }
  // A caller that stops half-way through a frame (or stops reading its
  // answer) is dropped rather than waited for.
  const timeval limit = {2, 0};
  sys::Setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  sys::Setsockopt(conn, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit));
  Server* self = server;
  rds::MutexLock lock(&self->pending_mu);
  if (!self->started) {
    self->wake = sys::MakeInternal(sys::EventFd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    std::thread(Run, self).detach();
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    // As Engine::Start: a fork from now on finds the thread in its own code.
    self->running.WaitForNotification();
    self->started = true;
  }
  self->pending.push_back({conn, std::move(rs)});
  Wake(self);
}

namespace internal {

void StopServing(uint64_t id) {
  Server* self = server;
  {
    rds::MutexLock lock(&self->pending_mu);
    for (size_t i = 0; i < self->pending.size();) {
      if (self->pending[i].rs->id == id) {
        sys::CloseInternal(self->pending[i].fd);
        self->pending[i] = std::move(self->pending.back());
        self->pending.pop_back();
      } else {
        ++i;
      }
    }
  }
  rds::MutexLock lock(&self->mu);
  for (size_t i = 0; i < self->conns.size();) {
    if (self->conns[i].rs->id == id) {
      DropConn(self, i);
    } else {
      ++i;
    }
  }
  Wake(self);
}

}  // namespace internal

bool HoldServerForFork(absl::Duration limit) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  return server->mu.TryLockFor(limit);
}

void ReleaseServerAfterFork() ABSL_NO_THREAD_SAFETY_ANALYSIS { server->mu.Unlock(); }

void ResetServerAfterFork() {
  server->abandoned.store(true);
  Abandon(server);
  server = new Server();
}

}  // namespace rds::share
