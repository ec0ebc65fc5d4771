// transports/stream/stream_link.cc — framed messages over a stream fd.
#include "transports/stream/stream_link.h"

#include <linux/sockios.h>
#include <linux/tcp.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <algorithm>
#include <cstring>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_format.h"
#include "conf/settings.h"
#include "engine/fault.h"
#include "engine/log.h"
#include "engine/stats.h"
#include "engine/sys.h"
#include "transports/host_channel.h"

namespace rds {
namespace {

// The release timer (ArmReleaseTimer): first look, and the longest interval.
constexpr absl::Duration kReleaseDelayMin = absl::Milliseconds(5);
constexpr absl::Duration kReleaseDelayMax = absl::Milliseconds(100);
constexpr size_t kReadChunk = 256 * 1024;
constexpr size_t kDirectReadMin = 64 * 1024;
// A payload read straight into its final buffer is read this much at a time:
// the kernel holds the socket's lock for the whole copy, and segments that
// arrive meanwhile wait in its backlog, unacknowledged, so one 1 MiB copy
// stretched the TCP round trip that BBR paces by (docs/perf/history.md §9.9).
constexpr size_t kDirectReadChunk = 128 * 1024;
// While a TCP link waits for more of a payload of kDirectReadMin or more, the
// kernel wakes its reader only once this much more of it has arrived (or all
// of it, if less is missing): SO_RCVLOWAT. Waking at every segment cost the
// sending host's CPU an IPI per 64 KiB, the bound of a 1 MiB stream across
// hosts (docs/perf/history.md §9.13).
constexpr size_t kPayloadWakeBytes = 256 * 1024;
// ReportTransportAcks: how often TCP's acknowledgements are looked at while
// messages wait for one (each look is one ioctl).
constexpr absl::Duration kAckPoll = absl::Milliseconds(1);
constexpr int kMaxIov = 128;
// Messages whose unwritten part is at most this long are copied into one
// contiguous staging buffer rather than given two iovec entries each: a writev
// of many tiny segments costs the kernel more per segment than the copy, and
// kMaxIov would otherwise cap a batch at 64 small messages.
constexpr size_t kStageMessageMax = 512;
constexpr size_t kStageBytes = 64 * 1024;

}  // namespace

std::shared_ptr<StreamLink> StreamLink::Create(EventLoop& loop, int fd, bool connecting,
                                               bool accept_fds, std::string description) {
  auto link = std::shared_ptr<StreamLink>(
      new StreamLink(loop, fd, connecting, accept_fds, std::move(description)));
  std::weak_ptr<StreamLink> weak = link;
  loop.Add(fd, connecting ? EPOLLOUT : EPOLLIN, [weak](uint32_t events) {
    if (auto l = weak.lock()) l->OnEvents(events);
  });
  if (!connecting) link->OnEstablished();
  return link;
}

StreamLink::StreamLink(EventLoop& loop, int fd, bool connecting, bool accept_fds,
                       std::string description)
    : loop_(loop),
      fd_(fd),
      connecting_(connecting),
      accept_fds_(accept_fds),
      description_(std::move(description)) {
  int domain = 0;
  socklen_t len = sizeof(domain);
  if (sys::Getsockopt(fd_, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0) {
    tcp_ = domain == AF_INET || domain == AF_INET6;
    unix_ = domain == AF_UNIX;
  }
  if (unix_) {
    // A same-host peer may announce its arena (the memfd comes with
    // SCM_RIGHTS) and send payloads by reference.
    accept_fds_ = true;
    reassembler_.AllowPayloadRefs(true);
    share_payloads_ = conf::Get().shm_arena_mb > 0;
  }
  if (tcp_) splice_min_ = static_cast<size_t>(conf::Get().tcp_splice_min_kb) * 1024;
}

StreamLink::~StreamLink() {
  if (!closed_) {
    EndSharing();
    loop_.Remove(fd_);
    sys::CloseInternal(fd_);
  }
  for (int f : received_fds_) sys::CloseInternal(f);
}

void StreamLink::SetCallbacks(Callbacks callbacks) {
  cb_ = std::move(callbacks);
  reassembler_.SetPayloadStorage(cb_.payload_storage, kDirectReadMin);
}

int StreamLink::TakePassedFd() {
  if (received_fds_.empty()) return -1;
  int f = received_fds_.front();
  received_fds_.erase(received_fds_.begin());
  return f;
}

std::optional<Link::Endpoints> StreamLink::endpoints() const {
  if (endpoints_) return endpoints_;
  if (!tcp_ || closed_) return std::nullopt;
  sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  Endpoints e;
  if (sys::Getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return std::nullopt;
  e.local = FromKernelSockaddr(ss);
  len = sizeof(ss);
  if (sys::Getpeername(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return std::nullopt;
  e.peer = FromKernelSockaddr(ss);
  endpoints_ = e;
  return e;
}

absl::Status StreamLink::HandOver(const std::string& engine, const MessagePtr& hello) {
  if (!tcp_ || closed_) return absl::FailedPreconditionError("not an open TCP link");
  return host_channel::Send(engine, hello, fd_);
}

absl::StatusOr<Link::Detached> StreamLink::DetachForHandOn(absl::Duration limit) {
  if (!tcp_ || closed_ || connecting_) return absl::FailedPreconditionError("not an open TCP link");
  // Everything given to the link goes into the socket first: the next
  // writer starts at a message boundary, after every message of ours.
  const absl::Time deadline = absl::Now() + limit;
  while (!out_.empty()) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError("the peer does not take what was sent to it");
    }
    struct pollfd pfd = {fd_, POLLOUT, 0};
    sys::Poll(&pfd, 1, static_cast<int>(std::max<int64_t>(1, absl::ToInt64Milliseconds(left))));
    want_write_ = false;
    Flush();
    if (closed_) return absl::UnavailableError("the connection failed");
  }
  absl::StatusOr<std::vector<uint8_t>> partial = reassembler_.TakePartial();
  if (!partial.ok()) return partial.status();
  // The next reader's wake-up threshold starts at one byte.
  const int one = 1;
  sys::Setsockopt(fd_, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof(one));
  rcvlowat_ = 1;
  const int dup = sys::Fcntl(fd_, F_DUPFD_CLOEXEC, 0);
  if (dup < 0) return absl::InternalError(absl::StrFormat("dup: %s", strerror(errno)));
  Detached d;
  d.fd = sys::MakeInternal(dup);
  d.partial = *std::move(partial);
  return d;
}

absl::Status StreamLink::RestoreInput(absl::Span<const uint8_t> partial) {
  bool completed = false;
  absl::Status s = reassembler_.Feed(partial, [&](wire::Header&&, Payload&&) { completed = true; });
  if (s.ok() && completed) s = absl::InvalidArgumentError("the bytes complete a message");
  if (!s.ok()) {
    reassembler_.Reset();
    return s;
  }
  UpdateWakeThreshold();
  return absl::OkStatus();
}

void StreamLink::Send(MessagePtr m) {
  if (closed_) return;
  Out o;
  if (share_payloads_ && m->payload.size() >= ShmArena::kMinBlock && m->payload.owner()) {
    if (!arena_) {
      // Announced once, ahead of the first message that refers to it.
      std::shared_ptr<ShmArena> arena = ShmArena::Get();
      if (arena && arena->Owns(m->payload)) AnnounceArena(std::move(arena));
    }
    if (arena_ && arena_->Owns(m->payload)) {
      wire::Header h = m->header;
      const uint64_t offset = arena_->OffsetOf(m->payload);
      if (wire::AddShimPayloadRef(&h, offset)) {
        // Lent from now: once the header is on its way the peer may borrow it.
        arena_->Lend(PeerPid(), offset);
        stats::Inc(stats::kShimShmPayloadsSent);
        wire::Encode(h, o.header);
        o.by_ref = true;
      }
    }
  }
  if (!o.by_ref) wire::Encode(m->header, o.header);
  if (splice_min_ > 0 && m->payload.size() >= splice_min_ && m->payload.PageBacked()) {
    if (!splicer_ && !splice_failed_) {
      splicer_ = PayloadSplicer::Create();
      if (!splicer_) {
        splice_failed_ = true;
        log::Warn("link %s: no pipe for splicing payloads (%s); copying them", description_,
                  strerror(errno));
      }
    }
    o.splice = splicer_ != nullptr;
  }
  o.m = std::move(m);
  out_.push_back(std::move(o));
  // Releases of the peer's blocks ride along with whatever goes its way.
  if (peer_arena_ && peer_arena_->HasReleased()) SendArenaReleases();
  if (!connecting_ && !want_write_) ScheduleFlush();
}

void StreamLink::AnnounceArena(std::shared_ptr<ShmArena> arena) {
  const uint64_t size = arena->size();
  QueueInternal(control::EncodeU64List(control::Op::kArenaAnnounce, {&size, 1}), arena->fd());
  arena_ = std::move(arena);
}

void StreamLink::OnEstablished() {
  // What TCP counts as acknowledged before our first byte (the SYN of a
  // connection we opened), and what is in the socket's send queue already
  // (a connection handed on by another process, DetachForHandOn: its bytes
  // go first): CheckTransportAcks counts from there.
  if (tcp_) {
    handshake_acked_ = TcpBytesAcked();
    int queued = 0;
    if (handshake_acked_ >= 0 && sys::Ioctl(fd_, SIOCOUTQ, &queued) == 0 && queued > 0) {
      handshake_acked_ += queued;
    }
    endpoints();  // kept: a link that died has none to ask its socket for
  }
  if (!share_payloads_ || arena_) return;
  std::shared_ptr<ShmArena> arena = ShmArena::Existing();
  if (arena && arena->LentTo(PeerPid()) > 0) AnnounceArena(std::move(arena));
}

pid_t StreamLink::PeerPid() {
  if (peer_pid_ < 0) {
    struct ucred cred = {};
    socklen_t len = sizeof(cred);
    peer_pid_ = sys::Getsockopt(fd_, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 ? cred.pid : 0;
  }
  return peer_pid_;
}

void StreamLink::QueueInternal(MessagePtr m, int pass_fd) {
  Out o;
  wire::Encode(m->header, o.header);
  o.m = std::move(m);
  o.pass_fd = pass_fd;
  o.internal = true;
  out_.push_back(std::move(o));
  if (!connecting_ && !want_write_) ScheduleFlush();
}

void StreamLink::ScheduleFlush() {
  if (flush_scheduled_) return;
  flush_scheduled_ = true;
  // A strong reference: a link dropped by its owner right after a last Send()
  // (a reply followed by CloseAfterFlush) still writes what it was given.
  loop_.Defer([self = shared_from_this()] {
    self->flush_scheduled_ = false;
    if (!self->connecting_ && !self->want_write_) self->Flush();
  });
}

void StreamLink::Close() {
  if (closed_) return;
  closed_ = true;
  if (ack_poll_timer_ != 0) loop_.Cancel(ack_poll_timer_);
  ack_poll_timer_ = 0;
  EndSharing();
  loop_.Remove(fd_);
  sys::CloseInternal(fd_);
  out_.clear();
  splicer_.reset();  // what its pipe held will never be part of a stream
}

void StreamLink::CloseAfterFlush() {
  close_after_flush_ = true;
  if (out_.empty() && !connecting_) Close();
}

void StreamLink::ArmConnectDeadline(absl::Duration limit) {
  std::weak_ptr<StreamLink> weak = weak_from_this();
  loop_.After(limit, [weak, limit] {
    std::shared_ptr<StreamLink> l = weak.lock();
    if (l && l->connecting()) {
      stats::Inc(stats::kShimConnFailed);
      l->Fail(absl::DeadlineExceededError(absl::StrFormat(
          "connect: no answer within %lld ms", static_cast<long long>(absl::ToInt64Milliseconds(limit)))));
    }
  });
}

void StreamLink::Fail(const absl::Status& why) {
  if (closed_) return;
  log::Debug("link %s closed: %s", description_, why.ToString());
  Close();
  // Reported from the event loop, never from inside Send(): the caller may be
  // in the middle of handing this link a batch of messages.
  auto keep = shared_from_this();
  loop_.Post([keep, why] {
    if (keep->cb_.on_closed) keep->cb_.on_closed(why);
  });
}

void StreamLink::FailBadInput(const std::string& what) {
  if (closed_) return;
  stats::Inc(stats::kShimConnDropBadInput);
  log::Warn("link %s: invalid input from peer (%s); dropping the connection", description_, what);
  Fail(absl::DataLossError(what));
}

void StreamLink::UpdateInterest() {
  if (closed_) return;
  uint32_t events = EPOLLIN;
  if (connecting_ || want_write_) events |= EPOLLOUT;
  loop_.Modify(fd_, events);
}

void StreamLink::OnEvents(uint32_t events) {
  auto keep = shared_from_this();
  if (closed_) return;
  if (connecting_) {
    if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) return;
    int err = 0;
    socklen_t len = sizeof(err);
    sys::Getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      stats::Inc(stats::kShimConnFailed);
      // Refused: nothing listens there (for a TCP link: no RDS endpoint
      // serves that host), which is not a failure worth retrying. Reset
      // before we saw it connected: the host's listener took it and closed
      // it (a kernel RDS node rejecting a poke), so the host is there.
      if (err == ECONNREFUSED) {
        Fail(absl::NotFoundError("connect: nothing listens there (connection refused)"));
      } else if (err == ECONNRESET || err == EPIPE) {
        Fail(absl::AbortedError(absl::StrFormat("connect: accepted, then %s", strerror(err))));
      } else {
        Fail(absl::UnavailableError(absl::StrFormat("connect: %s", strerror(err))));
      }
      return;
    }
    connecting_ = false;
    stats::Inc(stats::kShimConnConnected);
    UpdateInterest();
    OnEstablished();
    if (cb_.on_connected) cb_.on_connected();
    if (closed_) return;
    if (!out_.empty()) Flush();
    return;
  }
  if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
    if (tcp_) stats::Inc(stats::kTcpDataReadyCalls);
    OnReadable();
  }
  if (!closed_ && (events & EPOLLOUT)) {
    if (tcp_) stats::Inc(stats::kTcpWriteSpaceCalls);
    Flush();
  }
}

void StreamLink::OnReadable() {
  // However this returns, the socket's wake-up threshold matches what is
  // missing now.
  absl::Cleanup set_threshold = [this] { UpdateWakeThreshold(); };
  auto sink = [this](wire::Header&& h, Payload&& p) {
    // (Data only: an acknowledgement or notice between large messages
    // does not end their stream.)
    if (!wire::HasExtHeaders(h)) large_stream_ = h.len >= kDirectReadMin;
    if (closed_) return;
    if (unix_ && !ReceiveShared(h, p)) return;
    if (cb_.on_message) cb_.on_message(std::move(h), std::move(p));
  };
  // Bounded work per wake-up so one busy peer cannot starve the others.
  for (int round = 0; round < 16 && !closed_; ++round) {
    absl::Span<uint8_t> direct = reassembler_.DirectTarget(kDirectReadMin);
    ssize_t n;
    if (!direct.empty()) {
      n = sys::Read(fd_, direct.data(), std::min(direct.size(), kDirectReadChunk));
      if (n > 0) {
        last_read_ns_ = MonotonicNs();
        if (absl::Status s = reassembler_.CommitDirect(static_cast<size_t>(n), sink); !s.ok()) {
          Fail(s);
          return;
        }
        // Read into a waiting recvmsg's buffer: the next message stays in the
        // socket for that thread's next call to read straight into its
        // buffer too (the loop comes back while the socket is readable).
        if (reassembler_.TakeLentCompleted()) return;
        continue;
      }
      if (n < 0 && errno == EFAULT) {
        // Storage lent by a recvmsg whose buffer is not writable: the
        // payload continues in a buffer of its own (that recvmsg gets EFAULT
        // from its copy, as from the kernel).
        reassembler_.MovePayloadToOwnStorage();
        continue;
      }
    } else {
      if (read_buf_.size() < kReadChunk) read_buf_.resize(kReadChunk);
      if (accept_fds_) {
        struct iovec iov = {read_buf_.data(), read_buf_.size()};
        alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
        struct msghdr mh = {};
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        mh.msg_control = control;
        mh.msg_controllen = sizeof(control);
        n = sys::Recvmsg(fd_, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
        if (n >= 0) {
          for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
            if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
            size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < count; ++i) {
              int f;
              std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
              received_fds_.push_back(sys::MakeInternal(f));
            }
          }
        }
      } else {
        // In a stream of large messages, a header alone first: its payload
        // may then go straight into the buffer of a waiting recvmsg
        // (Callbacks::payload_storage) rather than through read_buf_.
        const size_t want = large_stream_ && cb_.payload_storage && reassembler_.AtBoundary()
                                ? wire::kHeaderSize
                                : read_buf_.size();
        n = sys::Read(fd_, read_buf_.data(), want);
      }
      if (n > 0) {
        last_read_ns_ = MonotonicNs();
        absl::Status s = reassembler_.Feed({read_buf_.data(), static_cast<size_t>(n)}, sink);
        if (!s.ok()) {
          FailBadInput(absl::StrFormat("invalid framing: %s", s.message()));
          return;
        }
        if (reassembler_.TakeLentCompleted()) return;
        if (static_cast<size_t>(n) < read_buf_.size() && !large_stream_) return;
        continue;
      }
    }
    if (n == 0) {
      Fail(absl::UnavailableError(reassembler_.AtBoundary() ? "peer closed the connection"
                                                            : "peer closed mid-message"));
      return;
    }
    if (errno == EAGAIN || errno == EINTR) return;
    Fail(absl::UnavailableError(absl::StrFormat("read: %s", strerror(errno))));
    return;
  }
}

void StreamLink::UpdateWakeThreshold() {
  if (!tcp_ || closed_) return;
  // The missing bytes are certain to come (or the connection to end, which
  // wakes the reader whatever the threshold): waiting for them cannot hang.
  // Between messages, and for small payloads, every byte wakes the reader.
  const size_t missing = reassembler_.PayloadMissing();
  const int want = reassembler_.PayloadSize() >= kDirectReadMin && missing > 0
                       ? static_cast<int>(std::min(missing, kPayloadWakeBytes))
                       : 1;
  if (want == rcvlowat_) return;
  if (sys::Setsockopt(fd_, SOL_SOCKET, SO_RCVLOWAT, &want, sizeof(want)) != 0) return;
  rcvlowat_ = want;
  if (want > 1) stats::Inc(stats::kShimTcpWaitsForPayload);
}

// Flush runs on application threads too (the inline send path), which do not
// block SIGPIPE as the engine thread does: a peer that closed must give EPIPE,
// not a signal.
ssize_t StreamLink::WriteNoSignal(struct iovec* iov, int n, int pass_fd, int flags) {
  return sys::SendmsgPassingFd(fd_, iov, n, pass_fd, MSG_NOSIGNAL | MSG_DONTWAIT | flags);
}

void StreamLink::Flush() {
  if (closed_ || connecting_) return;
  while (!out_.empty()) {
    // Skip messages cancelled before their first byte went out.
    while (!out_.empty() && out_.front().offset == 0 &&
           out_.front().m->cancelled.load(std::memory_order_relaxed)) {
      if (out_.front().by_ref) arena_->Return(PeerPid(), arena_->OffsetOf(out_.front().m->payload));
      out_.pop_front();
    }
    if (out_.empty()) break;
    if (out_.front().offset == 0 && out_.front().m->header.sequence != 0 && fault::Enabled() &&
        fault::CutMidMessage()) {
      // Test-only: half of this data message reaches the peer, then the link
      // dies, and the message must come again (a cut acknowledgement or other
      // control message would only test the reset).
      // (Half the header of a payload by reference: the peer must not see all
      // of it, as Close() takes back the loans of messages not fully written.)
      Out& o = out_.front();
      const size_t body = o.WireBytes() - wire::kHeaderSize;
      struct iovec part[2] = {{o.header, o.by_ref ? wire::kHeaderSize / 2 : wire::kHeaderSize},
                              {o.m->payload.data(), body / 2}};
      WriteNoSignal(part, body / 2 ? 2 : 1, o.pass_fd);
      Fail(absl::AbortedError("fault injection: cut mid-message"));
      return;
    }
    if (out_.front().splice && out_.front().offset >= wire::kHeaderSize) {
      if (!SpliceFront()) return;
      continue;
    }
    struct iovec iov[kMaxIov];
    int n = 0;
    if (stage_.size() < kStageBytes) stage_.resize(kStageBytes);
    size_t staged = 0;
    bool payload_follows = false;  // the batch ends with the header of a spliced payload
    for (auto it = out_.begin(); it != out_.end() && n + 2 <= kMaxIov; ++it) {
      // A message passing an fd starts a write of its own (SCM_RIGHTS goes
      // with the first byte of a sendmsg).
      if (it != out_.begin() &&
          (it->pass_fd >= 0 || it->m->cancelled.load(std::memory_order_relaxed))) {
        break;
      }
      size_t off = it->offset;
      const size_t plen = it->by_ref ? 0 : it->m->payload.size();
      const size_t rest = wire::kHeaderSize + plen - off;
      if (rest <= kStageMessageMax) {
        if (staged + rest > kStageBytes) break;
        uint8_t* dst = stage_.data() + staged;
        if (off < wire::kHeaderSize) {
          std::memcpy(dst, it->header + off, wire::kHeaderSize - off);
          dst += wire::kHeaderSize - off;
          off = wire::kHeaderSize;
        }
        const size_t poff = off - wire::kHeaderSize;
        // (An empty payload has no buffer: memcpy must not see its null pointer.)
        if (poff < plen) std::memcpy(dst, it->m->payload.data() + poff, plen - poff);
        // Extends the previous entry when that one ends where this begins.
        if (n > 0 && static_cast<uint8_t*>(iov[n - 1].iov_base) + iov[n - 1].iov_len ==
                         stage_.data() + staged) {
          iov[n - 1].iov_len += rest;
        } else {
          iov[n++] = {stage_.data() + staged, rest};
        }
        staged += rest;
        continue;
      }
      if (off < wire::kHeaderSize) {
        iov[n++] = {it->header + off, wire::kHeaderSize - off};
        off = wire::kHeaderSize;
      }
      if (it->splice) {
        payload_follows = true;  // by reference, once this write is done
        break;
      }
      size_t poff = off - wire::kHeaderSize;
      if (poff < plen) iov[n++] = {it->m->payload.data() + poff, plen - poff};
    }
    ssize_t w = WriteNoSignal(iov, n, out_.front().pass_fd, payload_follows ? MSG_MORE : 0);
    if (w < 0) {
      if (errno == EINTR) continue;
      WriteFailed();
      return;
    }
    if (w > 0) out_.front().pass_fd = -1;  // passed (the arena keeps its own fd)
    if (!Advance(static_cast<size_t>(w))) return;
  }
  if (want_write_) {
    want_write_ = false;
    UpdateInterest();
  }
  if (close_after_flush_) Close();
}

bool StreamLink::SpliceFront() {
  Out& o = out_.front();
  Payload& p = o.m->payload;
  const size_t poff = o.offset - wire::kHeaderSize;
  // From the first page in the pipe on, the pages are the kernel's to read
  // until the peer acknowledges the message.
  o.m->payload_on_loan.store(true, std::memory_order_relaxed);
  for (;;) {
    const ssize_t w = splicer_->Write(fd_, p.data() + poff, p.size() - poff, out_.size() > 1);
    if (w >= 0) {
      if (poff + static_cast<size_t>(w) == p.size()) stats::Inc(stats::kShimTcpPayloadsSpliced);
      return Advance(static_cast<size_t>(w));
    }
    if (errno == EINTR) continue;
    WriteFailed();
    return false;
  }
}

bool StreamLink::Advance(size_t n) {
  bytes_written_ += n;
  while (n > 0 && !out_.empty()) {
    Out& o = out_.front();
    const size_t total = o.WireBytes();
    const size_t take = std::min(n, total - o.offset);
    o.offset += take;
    n -= take;
    if (o.offset == total) {
      MessagePtr done = std::move(o.m);
      const bool internal = o.internal;
      out_.pop_front();
      if (report_transport_acks_ && !internal) AwaitTransportAck(*done, bytes_written_ - n);
      if (!internal && cb_.on_sent) cb_.on_sent(done);
      if (closed_) return false;
    }
  }
  if (!awaiting_ack_.empty()) ArmAckPoll();
  return true;
}

// ---------------------------------------------------------------------------
// Acknowledgements of the medium (kernel peers, kernel-rds.md §C.6): a
// message is done once TCP's snd_una has passed its last byte, that is once
// the peer acknowledged bytes_written_ at its end.

bool StreamLink::ReportTransportAcks() {
  if (!tcp_) return false;
  report_transport_acks_ = true;
  return true;
}

void StreamLink::AwaitTransportAck(const Message& m, uint64_t end) {
  // Congestion maps (sequence 0) are not retransmitted: nothing waits for them.
  if (m.header.sequence != 0) awaiting_ack_.push_back({end, m.header.sequence});
}

namespace {
// tcp_info.tcpi_state values (the kernel's tcp_states.h; not in the uapi headers).
constexpr uint8_t kTcpEstablished = 1;
constexpr uint8_t kTcpCloseWait = 8;
}  // namespace

int64_t StreamLink::TcpBytesAcked() const {
  struct tcp_info info = {};
  socklen_t len = sizeof(info);
  if (sys::Getsockopt(fd_, IPPROTO_TCP, TCP_INFO, &info, &len) != 0 ||
      len < offsetof(struct tcp_info, tcpi_bytes_acked) + sizeof(info.tcpi_bytes_acked)) {
    return -1;
  }
  return static_cast<int64_t>(info.tcpi_bytes_acked);
}

void StreamLink::CheckTransportAcks() {
  if (closed_ || awaiting_ack_.empty()) return;
  // The bytes the peer's TCP acknowledged: a counter (tcpi_bytes_acked) that
  // stays right when the connection is reset or destroyed — SIOCOUTQ, the
  // bytes not yet acknowledged, drops to 0 then, which once made everything
  // unacknowledged look delivered (lost across a reconnect).
  const int64_t now = TcpBytesAcked();
  if (now < 0 || handshake_acked_ < 0) {
    // Kernels before 4.1: SIOCOUTQ, trusted only while the connection is open.
    struct tcp_info info = {};
    socklen_t len = sizeof(info);
    int unacked = 0;
    if (sys::Getsockopt(fd_, IPPROTO_TCP, TCP_INFO, &info, &len) != 0 ||
        (info.tcpi_state != kTcpEstablished && info.tcpi_state != kTcpCloseWait) ||
        sys::Ioctl(fd_, SIOCOUTQ, &unacked) != 0) {
      return;
    }
    AckedThrough(bytes_written_ - static_cast<uint64_t>(std::max(unacked, 0)));
    return;
  }
  AckedThrough(static_cast<uint64_t>(now - handshake_acked_));
}

void StreamLink::AckedThrough(uint64_t acked) {
  uint64_t through = 0;
  while (!awaiting_ack_.empty() && awaiting_ack_.front().end <= acked) {
    through = awaiting_ack_.front().seq;
    awaiting_ack_.pop_front();
  }
  if (through != 0 && cb_.on_transport_acked) {
    auto keep = shared_from_this();
    cb_.on_transport_acked(through);
    if (closed_) return;
  }
  if (!awaiting_ack_.empty()) ArmAckPoll();
}

void StreamLink::ArmAckPoll() {
  if (ack_poll_timer_ != 0 || closed_) return;
  std::weak_ptr<StreamLink> weak = shared_from_this();
  ack_poll_timer_ = loop_.After(kAckPoll, [weak] {
    if (auto l = weak.lock()) {
      l->ack_poll_timer_ = 0;
      l->CheckTransportAcks();
    }
  });
}

void StreamLink::WriteFailed() {
  if (errno != EAGAIN) {
    Fail(absl::UnavailableError(absl::StrFormat("write: %s", strerror(errno))));
    return;
  }
  if (tcp_) stats::Inc(stats::kTcpSndbufFull);
  if (!want_write_) {
    want_write_ = true;
    UpdateInterest();
  }
}

// ---------------------------------------------------------------------------
// Shared payloads (AF_UNIX links, docs/perf/history.md §9.6).

bool StreamLink::ReceiveShared(wire::Header& h, Payload& p) {
  if (!wire::HasExtHeaders(h)) return true;  // an ordinary data message
  const wire::ExtHeaders ext = wire::ParseExtHeaders(h);
  if (wire::IsShimControl(h)) {
    const auto announce = static_cast<uint8_t>(control::Op::kArenaAnnounce);
    const auto release = static_cast<uint8_t>(control::Op::kArenaRelease);
    if (ext.shim_control != announce && ext.shim_control != release) return true;
    absl::StatusOr<control::Control> c = control::DecodeControl(h, p);
    if (!c.ok()) {
      FailBadInput(std::string(c.status().message()));
    } else if (c->op == control::Op::kArenaAnnounce) {
      OnArenaAnnounce(*c);
    } else {
      OnArenaRelease(*c);
    }
    return false;
  }
  if (!ext.shim_payload_ref) return true;
  if (!peer_arena_) {
    FailBadInput("a payload by reference before the peer announced its arena");
    return false;
  }
  absl::StatusOr<Payload> borrowed = peer_arena_->Borrow(*ext.shim_payload_ref, h.len);
  if (!borrowed.ok()) {
    FailBadInput(std::string(borrowed.status().message()));
    return false;
  }
  wire::StripShimPayloadRef(&h);
  p = std::move(*borrowed);
  stats::Inc(stats::kShimShmPayloadsReceived);
  if (release_timer_ == 0) ArmReleaseTimer(kReleaseDelayMin);
  return true;
}

void StreamLink::ArmReleaseTimer(absl::Duration delay) {
  std::weak_ptr<StreamLink> weak = weak_from_this();
  release_timer_ = loop_.After(delay, [weak, delay] {
    auto l = weak.lock();
    if (!l) return;
    l->release_timer_ = 0;
    if (l->closed_ || !l->peer_arena_) return;
    // (In this order: a payload released after the count was read is seen by
    // the next look; one released before it has queued its offset already.)
    const bool out = l->peer_arena_->Borrowed() > 0;
    bool sent = false;
    if (l->peer_arena_->HasReleased()) {
      l->SendArenaReleases();
      sent = true;
    }
    // Payloads still out: look again, less often while they stay unread.
    if (out) {
      l->ArmReleaseTimer(sent ? kReleaseDelayMin : std::min(delay * 2, kReleaseDelayMax));
    }
  });
}

void StreamLink::OnArenaAnnounce(const control::Control& c) {
  if (peer_arena_) return FailBadInput("the peer announced its arena twice");
  const int fd = TakePassedFd();
  if (fd < 0) return FailBadInput("an arena announcement without its file descriptor");
  absl::StatusOr<std::vector<uint64_t>> size = control::DecodeU64List(c);
  if (!size.ok() || size->size() != 1) {
    sys::CloseInternal(fd);
    return FailBadInput("a malformed arena announcement");
  }
  absl::StatusOr<std::shared_ptr<PeerArena>> arena = PeerArena::Map(PeerPid(), fd, (*size)[0]);
  if (!arena.ok()) return FailBadInput(std::string(arena.status().message()));
  peer_arena_ = std::move(*arena);
  // Releases happen on whichever thread drops a payload; the link collects
  // them on the loop (a posted task per batch, not per payload).
  std::weak_ptr<StreamLink> weak = weak_from_this();
  EventLoop* loop = &loop_;
  peer_arena_->Attach(this, [weak, loop] {
    loop->Post([weak] {
      if (auto l = weak.lock()) l->SendArenaReleases();
    });
  });
}

void StreamLink::OnArenaRelease(const control::Control& c) {
  absl::StatusOr<std::vector<uint64_t>> offsets = control::DecodeU64List(c);
  if (!offsets.ok()) return FailBadInput(std::string(offsets.status().message()));
  // (Possibly blocks lent on an earlier link to the same process.)
  std::shared_ptr<ShmArena> arena = arena_ ? arena_ : ShmArena::Existing();
  for (uint64_t offset : *offsets) {
    if (!arena || !arena->Return(PeerPid(), offset)) {
      return FailBadInput(absl::StrFormat("release of arena block %u, which was not lent", offset));
    }
  }
}

void StreamLink::SendArenaReleases() {
  if (closed_ || !peer_arena_) return;
  std::vector<uint64_t> offsets = peer_arena_->TakeReleased();
  absl::Span<const uint64_t> rest(offsets);
  while (!rest.empty()) {
    absl::Span<const uint64_t> batch = rest.subspan(0, control::kMaxU64ListValues);
    QueueInternal(control::EncodeU64List(control::Op::kArenaRelease, batch), -1);
    rest.remove_prefix(batch.size());
  }
}

void StreamLink::EndSharing() {
  if (release_timer_ != 0) {
    loop_.Cancel(release_timer_);
    release_timer_ = 0;
  }
  for (const Out& o : out_) {
    if (o.by_ref) {
      // Not completely written: the peer has no whole header, so it cannot
      // have borrowed the block.
      arena_->Return(PeerPid(), arena_->OffsetOf(o.m->payload));
    } else if (o.internal && peer_arena_ && wire::IsShimControl(o.m->header)) {
      // Releases that did not get out wait for the next link to the peer.
      absl::StatusOr<control::Control> c = control::DecodeControl(o.m->header, o.m->payload);
      if (c.ok() && c->op == control::Op::kArenaRelease) {
        absl::StatusOr<std::vector<uint64_t>> offsets = control::DecodeU64List(*c);
        if (offsets.ok()) peer_arena_->Requeue(*offsets);
      }
    }
  }
  if (peer_arena_) {
    // Payloads already borrowed keep the mapping.
    peer_arena_->Detach(this);
    peer_arena_.reset();
  }
}

}  // namespace rds
