// engine/share_park.cc — parking a socket on its own backing fd when its
// owner lets go of it, and taking a parked socket over (engine/share.h).
#include <arpa/inet.h>
#include <endian.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "conf/settings.h"
#include "engine/bind.h"
#include "engine/cong.h"
#include "engine/engine.h"
#include "engine/log.h"
#include "engine/readiness.h"
#include "engine/registry.h"
#include "engine/share.h"
#include "engine/share_internal.h"
#include "engine/share_wire.h"
#include "engine/socket.h"
#include "engine/sys.h"

namespace rds::share {
namespace {

using share_wire::ParkedState;

void Note(uint64_t id, uint8_t out[share_wire::kParkedNoteSize]) {
  std::memcpy(out, share_wire::kParkedMagic, sizeof(share_wire::kParkedMagic));
  uint64_t be = htobe64(id);
  std::memcpy(out + sizeof(share_wire::kParkedMagic), &be, sizeof(be));
}

ParkedState TakeStateLocked(RdsSocket& rs) ABSL_EXCLUSIVE_LOCKS_REQUIRED(rs.mu) {
  ParkedState st;
  st.id = rs.id;
  st.bound = rs.bound;
  st.connected = rs.connected;
  st.transport = rs.transport;
  st.sk_sndbuf = rs.sk_sndbuf;
  st.sk_rcvbuf = rs.sk_rcvbuf;
  st.sndtimeo_us = share_wire::DurationToMicros(rs.sndtimeo);
  st.rcvtimeo_us = share_wire::DurationToMicros(rs.rcvtimeo);
  st.recverr = rs.recverr;
  st.cong_monitor = rs.cong_monitor;
  st.cong_mask = rs.cong_mask;
  st.cong_notify = rs.cong_notify;
  st.timestamp = static_cast<uint8_t>(rs.timestamp);
  st.rx_trace_count = rs.rx_trace_count;
  std::memcpy(st.rx_trace_pos, rs.rx_trace_pos, sizeof(st.rx_trace_pos));
  st.tos = rs.tos;
  st.zerocopy = rs.zerocopy;
  st.inq = rs.inq;
  st.has_sent = rs.has_sent;
  st.zcookies.assign(rs.zcookies.begin(), rs.zcookies.end());
  st.queue.assign(rs.recv_queue.begin(), rs.recv_queue.end());
  rs.recv_queue.clear();
  rs.rcv_bytes = 0;
  return st;
}

void ApplyStateLocked(RdsSocket& rs, ParkedState& st) ABSL_EXCLUSIVE_LOCKS_REQUIRED(rs.mu) {
  rs.bound = st.bound;
  rs.connected = st.connected;
  rs.transport = st.transport;
  if (st.sk_sndbuf > 0) rs.sk_sndbuf = st.sk_sndbuf;
  if (st.sk_rcvbuf > 0) rs.sk_rcvbuf = st.sk_rcvbuf;
  rs.sndtimeo = share_wire::MicrosToDuration(st.sndtimeo_us);
  rs.rcvtimeo = share_wire::MicrosToDuration(st.rcvtimeo_us);
  rs.recverr = st.recverr;
  rs.cong_monitor = st.cong_monitor;
  rs.cong_mask = st.cong_mask;
  rs.cong_notify = st.cong_notify;
  rs.timestamp = static_cast<RdsSocket::Timestamp>(std::min<uint8_t>(st.timestamp, 2));
  rs.rx_trace_count = std::min<uint8_t>(st.rx_trace_count, 3);
  std::memcpy(rs.rx_trace_pos, st.rx_trace_pos, sizeof(rs.rx_trace_pos));
  rs.tos = st.tos;
  rs.zerocopy = st.zerocopy;
  rs.inq = st.inq;
  rs.has_sent = st.has_sent;
  rs.zcookies.assign(st.zcookies.begin(), st.zcookies.end());
  for (MessagePtr& m : st.queue) {
    rs.rcv_bytes += m->payload.size();
    rs.recv_queue.push_back(std::move(m));
  }
}

// The state as a memfd (an internal fd), or -1.
int StateFile(const ParkedState& st) {
  std::vector<uint8_t> body = share_wire::EncodeParked(st);
  int fd = memfd_create("rds-preload-parked", MFD_CLOEXEC);
  if (fd < 0) return -1;
  fd = sys::MakeInternal(fd);
  if (!sys::WriteAll(fd, body.data(), body.size())) {
    sys::CloseInternal(fd);
    return -1;
  }
  return fd;
}

absl::StatusOr<ParkedState> ReadStateFile(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0) return absl::InternalError("fstat of a parked state");
  // Anyone in the namespace can send to the backing fd's name: only a state
  // made by this user, of a plausible size, is taken.
  if (st.st_uid != geteuid()) return absl::PermissionDeniedError("a parked state of another user");
  constexpr off_t kMaxState = off_t{4} << 30;
  if (st.st_size < 0 || st.st_size > kMaxState) {
    return absl::InvalidArgumentError("an implausibly large parked state");
  }
  std::vector<uint8_t> body(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < body.size()) {
    ssize_t r = pread(fd, body.data() + got, body.size() - got, static_cast<off_t>(got));
    if (r <= 0) return absl::InternalError("short read of a parked state");
    got += static_cast<size_t>(r);
  }
  return share_wire::DecodeParked(body);
}

// A socket this process took over: shared, with its own copy of the backing
// fd, keeping readiness there for the other holders.
void KeepAsShared(RdsSocket& rs, int fd) {
  const int dup = sys::Fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (dup >= 0) internal::KeepSharedFd(rs, sys::MakeInternal(dup));
  rs.maybe_shared.store(true, std::memory_order_release);
  StartReadinessTokens(rs);
}

}  // namespace

void MarkShared(RdsSocket& rs) { rs.maybe_shared.store(true, std::memory_order_release); }

void MarkShared(RdsSocket& rs, int fd) {
  MarkShared(rs);
  if (rs.remote.load()) return;
  bool have_copy;
  {
    rds::MutexLock lock(&rs.mu);
    if (rs.released) return;
    have_copy = rs.shared_fd >= 0;
  }
  if (!have_copy) {
    const int dup = sys::Fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (dup >= 0) internal::KeepSharedFd(rs, sys::MakeInternal(dup));
  }
  // The other holders' calls come through the engine's listener.
  if (absl::Status s = Engine::Get().Serve(rs.ns); !s.ok()) {
    log::Warn("socket %016x: other processes cannot reach this one (%s)", rs.id, s.message());
  }
}

// True if a descriptor of the socket exists outside this process (a child
// started without fork, one in flight): asked of the kernel.
bool HeldElsewhere(RdsSocket& rs) {
  const int probe = CreateTokenSender(*rs.ns);
  if (probe < 0) return false;
  const bool held = BackingFdInUse(probe, rs.id);
  sys::CloseInternal(probe);
  return held;
}

// A socket of this process other than `rs`, bound on `addr` of its namespace.
bool OtherSocketOn(const RdsSocket& rs, const RdsAddr& addr) {
  for (const std::shared_ptr<RdsSocket>& other : AllLiveSockets()) {
    if (other.get() == &rs || other->ns != rs.ns || other->remote.load()) continue;
    rds::MutexLock lock(&other->mu);
    if (!other->released && other->bound && other->bound->addr == addr) return true;
  }
  return false;
}

bool Park(RdsSocket& rs, bool image_ends) {
  if (rs.remote.load()) return false;
  // A last close of a socket another process holds (a daemon's parent; CPython
  // closes its sockets before the image ends): what this engine queued of it
  // goes first, while the other holder's calls still come here and queue
  // behind it — once parked, the taker's engine would send its own at once,
  // ahead of ours (vm/kernel_interop saw the node receive a child's messages
  // before its parent's). At an image's end the exit drain has waited already.
  const bool held = HeldElsewhere(rs);
  if (!image_ends && held && Engine::IfRunning() != nullptr) {
    Engine::DrainSocket(rs, absl::Milliseconds(conf::Get().exit_flush_shared_ms));
  }
  internal::StopServing(rs.id);
  {
    rds::MutexLock lock(&rs.mu);
    if (rs.released) return true;
  }
  // A socket not known to be shared is parked only if some other descriptor
  // of it lives (this process has none left when its last one was closed).
  if (!rs.maybe_shared.load(std::memory_order_acquire) && !held) return false;
  const int port_fd = internal::SharePort(rs);
  // The kernel nodes' connections this engine holds on the socket's address
  // go with it, read up to now (what was read is in its queue), when this
  // image ends or has no other socket there (a daemon's parent closes its
  // socket as it exits: CPython does before the image ends).
  std::vector<HandedNodeConnection> nodes;
  std::optional<RdsEndpoint> bound;
  {
    rds::MutexLock lock(&rs.mu);
    bound = rs.bound;
  }
  // (At a last close this process has no descriptor left: the socket must
  // be held elsewhere, or the connection would go with a socket nobody takes.)
  if (bound && Engine::IfRunning() != nullptr &&
      (image_ends || (!OtherSocketOn(rs, bound->addr) && HeldElsewhere(rs)))) {
    {
      nodes = Engine::Get().HandOnNodeConnections(rs.ns, bound->addr,
                                                  share_wire::kMaxHandedNodePaths);
    }
  }
  // Out of the bind table first: a message that arrives from now on finds no
  // socket here, and its sender is told to send it again to the socket's next
  // owner (control kMoved) — the port is taken and has no owner for the moment.
  UnbindParked(rs);
  ParkedState st;
  int shared_fd;
  {
    rds::MutexLock lock(&rs.mu);
    rs.released = true;  // deliveries from now on find it gone, as after a close,
    rs.parked = true;    // but what they bring is sent again to its next owner
    st = TakeStateLocked(rs);
    shared_fd = std::exchange(rs.shared_fd, -1);
  }
  // Readiness tokens fill the backing fd's queue (net.unix.max_dgram_qlen
  // datagrams): none is posted any more, the ones there go, and our copy
  // with them, so that the send below says whether anyone else holds it.
  if (shared_fd >= 0) {
    DrainReadinessTokens(shared_fd);
    sys::CloseInternal(shared_fd);
  }
  st.nodes = std::move(nodes);
  int state_fd = StateFile(st);
  int sender = state_fd >= 0 ? CreateTokenSender(*rs.ns) : -1;
  uint8_t note[share_wire::kParkedNoteSize];
  Note(rs.id, note);
  // The state, the node connections' sockets, the port's lock (the state's
  // holder gets a copy of each).
  std::vector<int> fds = {state_fd};
  for (const HandedNodeConnection& c : st.nodes) {
    for (const HandedNodeConnection::Path& p : c.paths) fds.push_back(p.fd);
  }
  if (port_fd >= 0) fds.push_back(port_fd);
  bool parked = sender >= 0 && SendToBackingFd(sender, rs.id, note, sizeof(note), fds.data(),
                                               static_cast<int>(fds.size()));
  const int err = errno;
  if (sender >= 0) sys::CloseInternal(sender);
  if (state_fd >= 0) sys::CloseInternal(state_fd);
  for (HandedNodeConnection& c : st.nodes) {
    for (HandedNodeConnection::Path& p : c.paths) sys::CloseInternal(std::exchange(p.fd, -1));
    if (!parked && err == ECONNREFUSED) {
      // Nobody else holds the socket (the image ends): the connection ends
      // with this process, as it would have without the attempt.
      log::Info("%s -> %s: no other process holds socket %016x; the kernel node's connection "
                "closes with this image", c.laddr.ToString(), c.faddr.ToString(), rs.id);
    } else if (!parked) {
      log::Warn("%s -> %s: the kernel node's connection could not go on with socket %016x (%s); "
                "closed", c.laddr.ToString(), c.faddr.ToString(), rs.id, strerror(err));
    }
  }
  if (!parked) {
    // ECONNREFUSED: the backing fd is closed everywhere, this process was the
    // last holder. The socket is released here as usual.
    if (err != ECONNREFUSED) {
      log::Warn("socket %016x: cannot hand it on to the other processes holding it (%s); "
                "closed", rs.id, strerror(err));
    }
    rds::MutexLock lock(&rs.mu);
    rs.released = false;
    rs.parked = false;
    for (MessagePtr& m : st.queue) {
      rs.rcv_bytes += m->payload.size();
      rs.recv_queue.push_back(std::move(m));
    }
    return false;
  }
  log::Debug("socket %016x parked with %zu queued messages and %zu kernel node connections",
             rs.id, st.queue.size(), st.nodes.size());
  // The rest of a release (socket.cc Release), but the port went with the state.
  bool has_sent;
  {
    rds::MutexLock lock(&rs.mu);
    has_sent = rs.has_sent;
    rs.cong_notify = 0;
    rs.cong_mask = 0;
    if (rs.port_fd >= 0) sys::CloseInternal(std::exchange(rs.port_fd, -1));
    if (rs.token_sender >= 0) {
      sys::CloseInternal(rs.token_sender);
      rs.token_sender = -1;
    }
    rs.WakeWaitersLocked();
  }
  UpdateReceiveCongestion(rs);
  if (has_sent) Engine::Get().ReleaseSender(rs.shared_from_this());
  HostRegistry::Get().ReleaseSocket(rs.id);
  return true;
}

void ParkAllBeforeImageEnds(bool exec) {
  for (const std::shared_ptr<RdsSocket>& rs : AllLiveSockets()) {
    // A descriptor without FD_CLOEXEC lives on in the new image.
    if (exec) MarkShared(*rs);
    Park(*rs, /*image_ends=*/true);
  }
}

namespace internal {

bool KeepSharedFd(RdsSocket& rs, int fd) {
  rds::MutexLock lock(&rs.mu);
  if (rs.shared_fd < 0 && !rs.released) {
    rs.shared_fd = fd;
    rs.maybe_shared.store(true, std::memory_order_release);
    return true;
  }
  sys::CloseInternal(fd);
  return false;
}

int SharePort(RdsSocket& rs) {
  static rds::Mutex* mu = new rds::Mutex();  // one conversion at a time
  rds::MutexLock share_lock(mu);
  std::optional<RdsEndpoint> bound;
  {
    rds::MutexLock lock(&rs.mu);
    if (rs.port_fd >= 0 || !rs.bound) return rs.port_fd;
    bound = rs.bound;
  }
  absl::StatusOr<int> fd = rs.ns->ports().ParkPort(bound->addr, bound->port, rs.id);
  if (!fd.ok()) {
    log::Warn("socket %016x: cannot share its port with the other processes holding it (%s)",
              rs.id, fd.status().message());
    return -1;
  }
  rds::MutexLock lock(&rs.mu);
  rs.port_fd = *fd;
  return rs.port_fd;
}

void TakeParkedState(const std::shared_ptr<RdsSocket>& rs, int fd,
                     const std::optional<RdsEndpoint>& known_bound, int known_port_fd) {
  int state_fd = -1;
  int port_fd = -1;
  std::vector<int> more_fds;  // the node connections' sockets, then the port's lock
  for (;;) {
    uint8_t buf[64];
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxBackingFdPassed)];
    iovec iov = {buf, sizeof(buf)};
    msghdr msg = {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t r = sys::Recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) break;
    std::vector<int> fds;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < n; ++i) {
        int f;
        std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        fds.push_back(f);
      }
    }
    uint8_t note[share_wire::kParkedNoteSize];
    Note(rs->id, note);
    if (r == sizeof(note) && std::memcmp(buf, note, sizeof(note)) == 0 && !fds.empty()) {
      state_fd = sys::MakeInternal(fds[0]);
      for (size_t i = 1; i < fds.size(); ++i) more_fds.push_back(sys::MakeInternal(fds[i]));
      break;
    }
    for (int f : fds) sys::Close(f);  // a readiness token, or something stray
  }
  if (state_fd < 0) {
    if (!known_bound || known_port_fd < 0) {
      if (known_port_fd >= 0) sys::CloseInternal(known_port_fd);
      log::Warn("socket %016x: the process that owned it ended without handing it on (killed?); "
                "this process takes it over unbound, without the messages that were queued",
                rs->id);
      return;
    }
    log::Warn("socket %016x: the process that owned it ended without handing it on (killed?); "
              "this process takes it over, bound to %s:%u, without the messages that were "
              "queued and with default options", rs->id, known_bound->addr.ToString(),
              known_bound->port);
    {
      rds::MutexLock lock(&rs->mu);
      rs->bound = known_bound;
      const RdsAddr& a = known_bound->addr;
      in6_addr v6 = a.V6();
      const bool loopback =
          a.IsV4Mapped() ? (ntohl(a.V4().s_addr) >> 24) == 127 : IN6_IS_ADDR_LOOPBACK(&v6);
      rs->transport = loopback ? kTransLoop : kTransTcp;
    }
    if (absl::Status s = BindTakenOver(*rs, known_port_fd); !s.ok()) {
      log::Warn("socket %016x: cannot take its port back (%s); it is unbound now", rs->id,
                s.message());
      rds::MutexLock lock(&rs->mu);
      rs->bound.reset();
    }
    KeepAsShared(*rs, fd);
    return;
  }
  if (known_port_fd >= 0) sys::CloseInternal(known_port_fd);
  absl::StatusOr<ParkedState> st = ReadStateFile(state_fd);
  sys::CloseInternal(state_fd);
  const size_t node_fds = st.ok() ? st->NodeFds() : 0;
  if (!st.ok() || st->id != rs->id || more_fds.size() < node_fds ||
      more_fds.size() > node_fds + 1) {
    log::Warn("socket %016x: its parked state is unreadable (%s); taken over unbound", rs->id,
              !st.ok() ? std::string(st.status().message())
              : st->id != rs->id ? "another socket's" : "descriptors missing");
    for (int f : more_fds) sys::CloseInternal(f);
    return;
  }
  if (more_fds.size() > node_fds) port_fd = more_fds.back();
  {
    size_t next = 0;
    for (HandedNodeConnection& c : st->nodes) {
      for (HandedNodeConnection::Path& p : c.paths) p.fd = more_fds[next++];
    }
  }
  const size_t queued = st->queue.size();
  {
    rds::MutexLock lock(&rs->mu);
    ApplyStateLocked(*rs, *st);
  }
  if (absl::Status s = BindTakenOver(*rs, port_fd); !s.ok()) {
    log::Warn("socket %016x: cannot take its port back (%s); it is unbound now", rs->id,
              s.message());
    rds::MutexLock lock(&rs->mu);
    rs->bound.reset();
  }
  UpdateReceiveCongestion(*rs);
  KeepAsShared(*rs, fd);
  log::Debug("socket %016x taken over with %zu queued messages and %zu kernel node connections",
             rs->id, queued, st->nodes.size());
  // Bound here first: what the node sends the socket from now on finds it.
  if (!st->nodes.empty()) Engine::Get().TakeHandedNodeConnections(rs->ns, std::move(st->nodes));
}

}  // namespace internal
}  // namespace rds::share
