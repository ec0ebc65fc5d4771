// transports/stream/stream_link.cc — framed messages over a stream fd.
#include "transports/stream/stream_link.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"
#include "engine/fault.h"
#include "engine/log.h"
#include "engine/stats.h"
#include "engine/sys.h"

namespace rds {
namespace {

constexpr size_t kReadChunk = 256 * 1024;
constexpr size_t kDirectReadMin = 64 * 1024;
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
  tcp_ = sys::Getsockopt(fd_, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 &&
         (domain == AF_INET || domain == AF_INET6);
}

StreamLink::~StreamLink() {
  if (!closed_) {
    loop_.Remove(fd_);
    sys::CloseInternal(fd_);
  }
  for (int f : received_fds_) sys::CloseInternal(f);
}

int StreamLink::TakeReceivedFd() {
  if (received_fds_.empty()) return -1;
  int f = received_fds_.front();
  received_fds_.erase(received_fds_.begin());
  return f;
}

void StreamLink::Send(MessagePtr m) {
  if (closed_) return;
  Out o;
  wire::Encode(m->header, o.header);
  o.m = std::move(m);
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
  loop_.Remove(fd_);
  sys::CloseInternal(fd_);
  out_.clear();
}

void StreamLink::CloseAfterFlush() {
  close_after_flush_ = true;
  if (out_.empty() && !connecting_) Close();
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
      Fail(absl::UnavailableError(absl::StrFormat("connect: %s", strerror(err))));
      return;
    }
    connecting_ = false;
    stats::Inc(stats::kShimConnConnected);
    UpdateInterest();
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
  auto sink = [this](wire::Header&& h, Payload&& p) {
    if (!closed_ && cb_.on_message) cb_.on_message(std::move(h), std::move(p));
  };
  // Bounded work per wake-up so one busy peer cannot starve the others.
  for (int round = 0; round < 16 && !closed_; ++round) {
    absl::Span<uint8_t> direct = reassembler_.DirectTarget(kDirectReadMin);
    ssize_t n;
    if (!direct.empty()) {
      n = sys::Read(fd_, direct.data(), direct.size());
      if (n > 0) {
        last_read_ns_ = MonotonicNs();
        reassembler_.CommitDirect(static_cast<size_t>(n), sink);
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
        n = sys::Read(fd_, read_buf_.data(), read_buf_.size());
      }
      if (n > 0) {
        last_read_ns_ = MonotonicNs();
        absl::Status s = reassembler_.Feed({read_buf_.data(), static_cast<size_t>(n)}, sink);
        if (!s.ok()) {
          stats::Inc(stats::kShimConnDropBadInput);
          log::Warn("link %s: invalid framing from peer (%s); dropping the connection",
                    description_, s.message());
          Fail(absl::DataLossError(s.message()));
          return;
        }
        if (static_cast<size_t>(n) < read_buf_.size()) return;
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

// Flush runs on application threads too (the inline send path), which do not
// block SIGPIPE as the engine thread does: a peer that closed must give EPIPE,
// not a signal.
ssize_t StreamLink::WriteNoSignal(struct iovec* iov, int n) {
  struct msghdr mh = {};
  mh.msg_iov = iov;
  mh.msg_iovlen = static_cast<size_t>(n);
  return sys::Sendmsg(fd_, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
}

void StreamLink::Flush() {
  if (closed_ || connecting_) return;
  while (!out_.empty()) {
    // Skip messages cancelled before their first byte went out.
    while (!out_.empty() && out_.front().offset == 0 &&
           out_.front().m->cancelled.load(std::memory_order_relaxed)) {
      out_.pop_front();
    }
    if (out_.empty()) break;
    if (out_.front().offset == 0 && fault::Enabled() && fault::CutMidMessage()) {
      // Test-only: half of this message reaches the peer, then the link dies.
      Out& o = out_.front();
      struct iovec part[2] = {{o.header, wire::kHeaderSize},
                              {o.m->payload.data(), o.m->payload.size() / 2}};
      WriteNoSignal(part, o.m->payload.size() / 2 ? 2 : 1);
      Fail(absl::AbortedError("fault injection: cut mid-message"));
      return;
    }
    struct iovec iov[kMaxIov];
    int n = 0;
    if (stage_.size() < kStageBytes) stage_.resize(kStageBytes);
    size_t staged = 0;
    for (auto it = out_.begin(); it != out_.end() && n + 2 <= kMaxIov; ++it) {
      if (it != out_.begin() && it->m->cancelled.load(std::memory_order_relaxed)) break;
      size_t off = it->offset;
      const size_t plen = it->m->payload.size();
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
      size_t poff = off - wire::kHeaderSize;
      if (poff < plen) iov[n++] = {it->m->payload.data() + poff, plen - poff};
    }
    ssize_t w = WriteNoSignal(iov, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        if (tcp_) stats::Inc(stats::kTcpSndbufFull);
        if (!want_write_) {
          want_write_ = true;
          UpdateInterest();
        }
        return;
      }
      Fail(absl::UnavailableError(absl::StrFormat("write: %s", strerror(errno))));
      return;
    }
    size_t left = static_cast<size_t>(w);
    while (left > 0 && !out_.empty()) {
      Out& o = out_.front();
      size_t total = wire::kHeaderSize + o.m->payload.size();
      size_t take = std::min(left, total - o.offset);
      o.offset += take;
      left -= take;
      if (o.offset == total) {
        MessagePtr done = std::move(o.m);
        out_.pop_front();
        if (cb_.on_sent) cb_.on_sent(done);
        if (closed_) return;
      }
    }
  }
  if (want_write_) {
    want_write_ = false;
    UpdateInterest();
  }
  if (close_after_flush_) Close();
}

}  // namespace rds
