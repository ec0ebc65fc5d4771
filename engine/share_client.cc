// engine/share_client.cc — a process that holds a descriptor of a socket
// owned by another process (engine/share.h): attaching to the socket, the
// forwarded calls, and taking the socket over when its owner let go of it.
#include <fcntl.h>
#include <linux/rds.h>
#include <linux/sockios.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/clock.h"
#include "engine/abandon.h"
#include "engine/bytes.h"
#include "engine/control.h"
#include "engine/engine.h"
#include "engine/errors.h"
#include "engine/log.h"
#include "engine/netns.h"
#include "engine/registry.h"
#include "engine/share.h"
#include "engine/share_internal.h"
#include "engine/share_wire.h"
#include "engine/signals.h"
#include "engine/socket.h"
#include "engine/sys.h"
#include "engine/usercopy.h"
#include "engine/waiter.h"
#include "engine/wire.h"
#include "transports/host_channel.h"

namespace rds::share {

void ResetServerAfterFork();  // share_server.cc

namespace {

using share_wire::Op;
using share_wire::Reply;
using share_wire::Request;

// The status a forwarded call returns when this process took the socket
// over meanwhile (Adopted).
constexpr char kAdoptedMessage[] = "rds-preload: socket taken over by this process";

absl::Status AdoptedStatus() { return absl::AbortedError(kAdoptedMessage); }

// This process's remote sockets, by id (a descriptor that arrives again, or
// a dup, finds the same object).
struct Remotes {
  rds::Mutex attach_mu;  // AttachReceived, one at a time
  rds::Mutex mu;
  absl::flat_hash_map<uint64_t, std::weak_ptr<RdsSocket>> by_id ABSL_GUARDED_BY(mu);
};
Remotes* remotes = new Remotes();

// How long a call keeps looking for a socket whose owner is changing.
constexpr absl::Duration kFindOwnerFor = absl::Seconds(5);

// This process takes the socket over (nobody owns it): true if it did.
bool TryTakeOverLocked(const std::shared_ptr<RdsSocket>& rs, Client& c)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  // Reachable before named: the claim makes this process the owner that
  // senders route the socket's port to, and holders reattach to, at once; an
  // engine that did not listen yet would look gone to them, and a sender
  // drops what it had for a gone engine (DESIGN.md §2.4).
  if (absl::Status s = Engine::Get().Serve(rs->ns); !s.ok()) {
    log::Warn("socket %016x: taken over while its namespace is not served: %s", rs->id,
              s.ToString());
  }
  if (!HostRegistry::Get().ClaimSocket(rs->id).ok()) return false;  // another holder was first
  RegisterTakenOver(rs, c.backing);
  internal::TakeParkedState(rs, c.backing, c.bound, std::exchange(c.port_fd, -1));
  // Local from now on, with its state in place: threads that find the flag
  // clear run locally.
  rs->remote.store(false, std::memory_order_release);
  sys::CloseInternal(c.backing);
  c.backing = -1;
  rds::MutexLock lock(&remotes->mu);
  remotes->by_id.erase(rs->id);
  return true;
}

// Opens the stream to the owner's server: a socketpair whose other end goes
// to the owner's engine with a kShareClient hello, then our copy of the
// backing fd, answered by one byte.
absl::Status ConnectLocked(RdsSocket& rs, Client& c, pid_t owner) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  int sv[2];
  if (sys::SocketPair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return absl::UnavailableError(absl::StrFormat("socketpair: %s", strerror(errno)));
  }
  const int mine = sys::MakeInternal(sv[0]);
  control::Hello h;
  h.kind = control::HelloKind::kShareClient;
  h.pid = static_cast<uint32_t>(getpid());
  h.uid = getuid();
  h.ns = rs.ns->key();
  h.socket_id = rs.id;
  absl::Status s = host_channel::Send(HostRegistry::Get().EngineSocketPath(owner),
                                       control::EncodeHello(h), sv[1]);
  sys::Close(sv[1]);
  if (s.ok()) {
    char b = 'I';
    iovec iov = {&b, 1};
    if (sys::SendmsgPassingFd(mine, &iov, 1, c.backing, MSG_NOSIGNAL) != 1) {
      s = absl::UnavailableError("owner gone");
    }
  }
  if (s.ok()) {
    // 'A', the binding, and a descriptor of the lock that holds the port.
    pollfd p = {mine, POLLIN, 0};
    uint8_t ack[64];
    iovec in = {ack, sizeof(ack)};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    msghdr msg = {};
    msg.msg_iov = &in;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t n = sys::Poll(&p, 1, 2000) == 1 ? sys::Recvmsg(mine, &msg, MSG_CMSG_CLOEXEC) : -1;
    int port_fd = -1;
    if (cmsghdr* cm = n > 0 ? CMSG_FIRSTHDR(&msg) : nullptr;
        cm != nullptr && cm->cmsg_type == SCM_RIGHTS && cm->cmsg_len == CMSG_LEN(sizeof(int))) {
      std::memcpy(&port_fd, CMSG_DATA(cm), sizeof(int));
      port_fd = sys::MakeInternal(port_fd);
    }
    bytes::Reader r(ack, n > 0 ? static_cast<size_t>(n) : 0);
    const bool accepted = r.U8() == 'A';
    std::optional<RdsEndpoint> bound;
    if (r.U8()) {
      bound.emplace();
      bound->addr = r.Addr();
      bound->port = r.U16();
    }
    if (!accepted || !r.ok()) {
      if (port_fd >= 0) sys::CloseInternal(port_fd);
      s = absl::UnavailableError("the owner does not serve the socket");
    } else {
      if (c.port_fd >= 0) sys::CloseInternal(c.port_fd);
      c.port_fd = port_fd;
      c.bound = bound;
    }
  }
  if (!s.ok()) {
    sys::CloseInternal(mine);
    return s;
  }
  c.conn = mine;
  return absl::OkStatus();
}

// One forwarded call. AdoptedStatus() if this process owns the socket now.
absl::StatusOr<Reply> Call(RdsSocket& rs, const Request& q) {
  Client& c = *rs.share_client;
  rds::MutexLock lock(&c.mu);
  const std::vector<uint8_t> body = share_wire::EncodeRequest(q);
  const absl::Time give_up = absl::Now() + kFindOwnerFor;
  for (;;) {
    if (!rs.remote.load(std::memory_order_acquire)) return AdoptedStatus();
    if (c.detached) return RdsError(EBADF);  // closed meanwhile in this process
    if (c.conn < 0) {
      const pid_t owner = HostRegistry::Get().SocketOwner(rs.id);
      absl::Status s;
      if (owner == 0) {
        if (TryTakeOverLocked(rs.shared_from_this(), c)) return AdoptedStatus();
        s = absl::UnavailableError("another process is taking the socket over");
      } else {
        s = ConnectLocked(rs, c, owner);
      }
      if (!s.ok()) {
        if (absl::Now() > give_up) {
          log::Warn("socket %016x: its owner (pid %d) does not answer: %s", rs.id,
                    static_cast<int>(owner), s.message());
          return RdsError(EBADF);
        }
        absl::SleepFor(absl::Milliseconds(2));
        continue;
      }
    }
    if (share_wire::WriteFrame(c.conn, body).ok()) {
      absl::StatusOr<std::vector<uint8_t>> reply = share_wire::ReadFrame(c.conn);
      if (reply.ok()) return share_wire::DecodeReply(*reply);
    }
    // The owner let go of the socket (or died): find it again.
    sys::CloseInternal(c.conn);
    c.conn = -1;
  }
}

// O_NONBLOCK is the open file's flag, shared by every process holding it: read
// from the backing fd's copy.
bool Blocking(RdsSocket& rs, int flags) {
  if (flags & MSG_DONTWAIT) return false;
  Client& c = *rs.share_client;
  rds::MutexLock lock(&c.mu);
  const int fl = c.backing >= 0 ? sys::Fcntl(c.backing, F_GETFL, 0) : -1;
  if (fl >= 0) return !(fl & O_NONBLOCK);
  rds::MutexLock slock(&rs.mu);
  return !rs.nonblocking;
}

std::optional<absl::Time> DeadlineOf(int64_t timeout_us) {
  if (timeout_us < 0) return std::nullopt;
  return absl::Now() + absl::Microseconds(timeout_us);
}

absl::StatusOr<std::vector<uint8_t>> CopyIn(const void* p, size_t n, size_t limit, int err) {
  if (n > limit) return RdsError(err);
  std::vector<uint8_t> v(n);
  if (n > 0) {
    if (absl::Status s = usercopy::FromUser(v.data(), p, n); !s.ok()) return s;
  }
  return v;
}

absl::StatusOr<std::vector<iovec>> CopyIov(const msghdr& msg) {
  if (msg.msg_iovlen > IOV_MAX) return RdsError(EMSGSIZE);
  std::vector<iovec> iov(msg.msg_iovlen);
  if (!iov.empty()) {
    if (absl::Status s = usercopy::FromUser(iov.data(), msg.msg_iov, iov.size() * sizeof(iovec));
        !s.ok()) {
      return s;
    }
  }
  return iov;
}

}  // namespace

bool Adopted(const absl::Status& s) {
  return absl::IsAborted(s) && s.message() == kAdoptedMessage;
}

absl::StatusOr<std::shared_ptr<RdsSocket>> AttachReceived(uint64_t id, int fd) {
  // One at a time: this process's own ownership locks are invisible to it,
  // so two threads attaching the same socket would both claim it.
  rds::MutexLock attach_lock(&remotes->attach_mu);
  {
    rds::MutexLock lock(&remotes->mu);
    auto it = remotes->by_id.find(id);
    if (it != remotes->by_id.end()) {
      if (std::shared_ptr<RdsSocket> rs = it->second.lock()) return rs;
    }
  }
  for (std::shared_ptr<RdsSocket>& rs : AllLiveSockets()) {
    if (rs->id == id) return std::move(rs);
  }
  absl::StatusOr<std::shared_ptr<NetNs>> ns = NetNs::OfSocketFd(fd);
  if (!ns.ok()) {
    log::Warn("fd %d: %s; assuming the current network namespace", fd, ns.status().message());
    ns = NetNs::OfCurrentThread();
    if (!ns.ok()) return ns.status();
  }
  const int fl = sys::Fcntl(fd, F_GETFL, 0);
  const bool nonblocking = fl >= 0 && (fl & O_NONBLOCK);
  if (HostRegistry::Get().SocketOwner(id) == 0) {
    // Nobody owns it: this process takes it over, with its parked state.
    absl::StatusOr<std::shared_ptr<RdsSocket>> rs = CreateSocket(id, *ns, fd, nonblocking);
    if (rs.ok()) {
      internal::TakeParkedState(*rs, fd);
      return rs;
    }
    // Another holder was first: it is remote here.
  }
  auto rs = std::make_shared<RdsSocket>(id, *ns, nonblocking);
  rs->share_client = std::make_shared<Client>();
  {
    rds::MutexLock lock(&rs->share_client->mu);
    const int dup = sys::Fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (dup < 0) return RdsError(errno == EMFILE ? EMFILE : ENOMEM);
    rs->share_client->backing = sys::MakeInternal(dup);
  }
  rs->remote.store(true, std::memory_order_release);
  rds::MutexLock lock(&remotes->mu);
  remotes->by_id[id] = rs;
  log::Debug("fd %d: RDS socket %016x is owned by another process; calls are forwarded", fd, id);
  return rs;
}

absl::StatusOr<size_t> SendMsg(RdsSocket& rs, const msghdr& msg, int flags) {
  Request q;
  q.op = Op::kSend;
  q.arg[0] = flags & ~MSG_DONTWAIT;
  absl::StatusOr<std::vector<uint8_t>> name =
      CopyIn(msg.msg_name, msg.msg_name ? msg.msg_namelen : 0, sizeof(sockaddr_storage), EINVAL);
  if (!name.ok()) return name.status();
  absl::StatusOr<std::vector<iovec>> iov = CopyIov(msg);
  if (!iov.ok()) return iov.status();
  size_t total = 0;
  for (const iovec& v : *iov) total += v.iov_len;
  // Larger than any RDS message (the owner answers EMSGSIZE for what is
  // between): not carried at all.
  if (total > 2 * wire::kMaxMessageSize) return RdsError(EMSGSIZE);
  std::vector<uint8_t> data(total);
  if (absl::Status s = usercopy::FromUserIov(data.data(), iov->data(), iov->size(), total); !s.ok()) {
    return s;
  }
  absl::StatusOr<std::vector<uint8_t>> control =
      CopyIn(msg.msg_control, msg.msg_control ? msg.msg_controllen : 0, 65536, ENOBUFS);
  if (!control.ok()) return control.status();
  q.blobs = {std::move(*name), std::move(data), std::move(*control)};
  const bool blocking = Blocking(rs, flags);
  std::optional<absl::Time> deadline;
  bool first = true;
  absl::Duration pause = absl::Microseconds(200);
  for (;;) {
    absl::StatusOr<Reply> p = Call(rs, q);
    if (!p.ok()) return p.status();
    if (p->result >= 0) return static_cast<size_t>(p->result);
    const int err = static_cast<int>(-p->result);
    // A full send buffer or a congested destination: the owner's state
    // changes without a sign here, so a blocking sender looks again soon.
    if (!blocking || (err != EAGAIN && err != ENOBUFS)) return RdsError(err);
    if (first) deadline = DeadlineOf(p->timeout_us);
    first = false;
    absl::Time until = absl::Now() + pause;
    if (deadline) {
      if (absl::Now() >= *deadline) return RdsError(ETIMEDOUT);
      until = std::min(until, *deadline);
    }
    absl::Status slept = Waiter::ForThisThread().Sleep(until);
    if (!slept.ok() && ErrnoOf(slept) != ETIMEDOUT) return slept;
    pause = std::min(pause * 2, absl::Milliseconds(10));
  }
}

absl::StatusOr<size_t> RecvMsg(RdsSocket& rs, int fd, msghdr& msg, int flags) {
  absl::StatusOr<std::vector<iovec>> iov = CopyIov(msg);
  if (!iov.ok()) return iov.status();
  size_t room = 0;
  for (const iovec& v : *iov) room += v.iov_len;
  Request q;
  q.op = Op::kRecv;
  q.arg[0] = flags & ~MSG_DONTWAIT;
  q.arg[1] = static_cast<int32_t>(std::min<size_t>(room, wire::kMaxMessageSize + wire::kCongMapBytes));
  q.arg[2] = msg.msg_name ? static_cast<int32_t>(std::min<size_t>(msg.msg_namelen, sizeof(sockaddr_storage))) : 0;
  q.arg[3] = msg.msg_control ? static_cast<int32_t>(std::min<size_t>(msg.msg_controllen, 65536)) : 0;
  const bool blocking = Blocking(rs, flags);
  std::optional<absl::Time> deadline;
  bool first = true;
  for (;;) {
    absl::StatusOr<Reply> p = Call(rs, q);
    if (!p.ok()) return p.status();
    if (p->result >= 0) {
      if (p->blobs.size() != 3) return RdsError(EIO);
      // Never more than the caller offered room for, whatever the owner says.
      const std::vector<uint8_t>& data = p->blobs[0];
      if (absl::Status s = usercopy::ToUserIov(iov->data(), iov->size(), data.data(),
                                               std::min<size_t>(data.size(), room));
          !s.ok()) {
        return s;
      }
      const std::vector<uint8_t>& name = p->blobs[1];
      if (!name.empty()) {
        if (absl::Status s = usercopy::ToUser(msg.msg_name, name.data(),
                                              std::min<size_t>(name.size(), q.arg[2]));
            !s.ok()) {
          return s;
        }
      }
      const std::vector<uint8_t>& control = p->blobs[2];
      const size_t control_used = std::min<size_t>(control.size(), q.arg[3]);
      if (control_used > 0) {
        if (absl::Status s = usercopy::ToUser(msg.msg_control, control.data(), control_used);
            !s.ok()) {
          return s;
        }
      }
      msg.msg_flags = p->out[0];
      msg.msg_namelen = static_cast<socklen_t>(std::max(p->out[1], 0));
      msg.msg_controllen = std::min<size_t>(std::max(p->out[2], 0), control_used);
      return static_cast<size_t>(p->result);
    }
    const int err = static_cast<int>(-p->result);
    if (!blocking || err != EAGAIN) return RdsError(err);
    if (first) deadline = DeadlineOf(p->timeout_us);
    first = false;
    // The owner keeps the backing fd readable while it has messages queued;
    // the stream to it ends if it dies (nothing else ever comes on it).
    pollfd pfd[2] = {{fd, POLLIN, 0}, {OwnerLinkFd(rs), POLLIN, 0}};
    struct timespec left;
    const struct timespec* wait = nullptr;
    if (deadline) {
      absl::Duration d = *deadline - absl::Now();
      if (d <= absl::ZeroDuration()) return RdsError(ETIMEDOUT);
      left = absl::ToTimespec(d);
      wait = &left;
    }
    int r = sys::Ppoll(pfd, pfd[1].fd >= 0 ? 2 : 1, wait, nullptr);
    if (r < 0 && errno == EINTR && signals::Policy() != signals::Interrupted::kRestart) {
      return RdsError(EINTR);
    }
  }
}

absl::Status Bind(RdsSocket& rs, const sockaddr* addr, socklen_t len) {
  if (static_cast<int>(len) < 0) return RdsError(EINVAL);
  absl::StatusOr<std::vector<uint8_t>> a = CopyIn(addr, len, sizeof(sockaddr_storage), EINVAL);
  if (!a.ok()) return a.status();
  Request q;
  q.op = Op::kBind;
  q.blobs.push_back(std::move(*a));
  absl::StatusOr<Reply> p = Call(rs, q);
  if (!p.ok()) return p.status();
  return p->result < 0 ? RdsError(static_cast<int>(-p->result)) : absl::OkStatus();
}

absl::Status Connect(RdsSocket& rs, const sockaddr* addr, socklen_t len) {
  if (static_cast<int>(len) < 0) return RdsError(EINVAL);
  absl::StatusOr<std::vector<uint8_t>> a = CopyIn(addr, len, sizeof(sockaddr_storage), EINVAL);
  if (!a.ok()) return a.status();
  Request q;
  q.op = Op::kConnect;
  q.blobs.push_back(std::move(*a));
  absl::StatusOr<Reply> p = Call(rs, q);
  if (!p.ok()) return p.status();
  return p->result < 0 ? RdsError(static_cast<int>(-p->result)) : absl::OkStatus();
}

absl::StatusOr<socklen_t> GetName(RdsSocket& rs, bool peer, sockaddr_storage* out) {
  Request q;
  q.op = Op::kGetName;
  q.arg[0] = peer ? 1 : 0;
  absl::StatusOr<Reply> p = Call(rs, q);
  if (!p.ok()) return p.status();
  if (p->result < 0) return RdsError(static_cast<int>(-p->result));
  if (p->blobs.size() != 1 || p->blobs[0].size() > sizeof(*out)) return RdsError(EIO);
  std::memset(out, 0, sizeof(*out));
  std::memcpy(out, p->blobs[0].data(), p->blobs[0].size());
  return static_cast<socklen_t>(p->blobs[0].size());
}

absl::Status SetSockOpt(RdsSocket& rs, int level, int name, const void* val, socklen_t len) {
  if (static_cast<int>(len) < 0) return RdsError(EINVAL);
  absl::StatusOr<std::vector<uint8_t>> v = CopyIn(val, len, 1 << 20, EINVAL);
  if (!v.ok()) return v.status();
  Request q;
  q.op = Op::kSetOpt;
  q.arg[0] = level;
  q.arg[1] = name;
  q.blobs.push_back(std::move(*v));
  absl::StatusOr<Reply> p = Call(rs, q);
  if (!p.ok()) return p.status();
  return p->result < 0 ? RdsError(static_cast<int>(-p->result)) : absl::OkStatus();
}

absl::StatusOr<int> GetSockOpt(RdsSocket& rs, int level, int name, void* val, socklen_t* len) {
  int room = 0;
  if (absl::Status s = usercopy::FromUser(&room, len, sizeof(room)); !s.ok()) return s;
  Request q;
  q.op = Op::kGetOpt;
  q.arg[0] = level;
  q.arg[1] = name;
  q.arg[2] = room;
  absl::StatusOr<Reply> p = Call(rs, q);
  if (!p.ok()) return p.status();
  const int err = p->result < 0 ? static_cast<int>(-p->result) : 0;
  // The length is written back on success and where RDS_INFO says how much
  // room it needs.
  if (err == 0 || err == ENOSPC) {
    if (p->blobs.size() == 1 && !p->blobs[0].empty() && room > 0) {
      if (absl::Status s = usercopy::ToUser(
              val, p->blobs[0].data(), std::min<size_t>(p->blobs[0].size(), room));
          !s.ok()) {
        return s;
      }
    }
    int out = p->out[0];
    if (absl::Status s = usercopy::ToUser(len, &out, sizeof(out)); !s.ok()) return s;
  }
  if (err) return RdsError(err);
  return static_cast<int>(p->result);
}

absl::StatusOr<short> PollMask(RdsSocket& rs) {
  Request q;
  q.op = Op::kPoll;
  absl::StatusOr<Reply> p = Call(rs, q);
  if (!p.ok()) return p.status();
  return static_cast<short>(p->result);
}

absl::StatusOr<int> Ioctl(RdsSocket& rs, unsigned long request, void* arg) {
  uint8_t byte = 0;
  if (request == SIOCRDSSETTOS) {
    if (absl::Status s = usercopy::FromUser(&byte, arg, 1); !s.ok()) return s;
  }
  Request q;
  q.op = Op::kIoctl;
  q.arg[0] = static_cast<int32_t>(request);
  q.blobs.push_back({byte});
  absl::StatusOr<Reply> p = Call(rs, q);
  if (!p.ok()) return p.status();
  if (p->result < 0) return RdsError(static_cast<int>(-p->result));
  if (request == SIOCRDSGETTOS && p->blobs.size() == 1 && !p->blobs[0].empty()) {
    if (absl::Status s = usercopy::ToUser(arg, p->blobs[0].data(), 1); !s.ok()) return s;
  }
  return static_cast<int>(p->result);
}

int OwnerLinkFd(RdsSocket& rs) {
  if (!rs.share_client) return -1;
  rds::MutexLock lock(&rs.share_client->mu);
  return rs.share_client->conn;
}

void Detach(RdsSocket& rs) {
  Client& c = *rs.share_client;
  {
    rds::MutexLock lock(&c.mu);
    if (c.conn >= 0) sys::CloseInternal(c.conn);
    if (c.backing >= 0) sys::CloseInternal(c.backing);
    if (c.port_fd >= 0) sys::CloseInternal(c.port_fd);
    c.conn = c.backing = c.port_fd = -1;
    c.detached = true;
  }
  rds::MutexLock lock(&remotes->mu);
  auto it = remotes->by_id.find(rs.id);
  if (it != remotes->by_id.end() && it->second.lock().get() == &rs) remotes->by_id.erase(it);
}

void ResetAfterFork() {
  Abandon(remotes);
  remotes = new Remotes();
  ResetServerAfterFork();
}

}  // namespace rds::share
