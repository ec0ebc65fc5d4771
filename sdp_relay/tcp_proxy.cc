// sdp_relay/tcp_proxy.cc — see tcp_proxy.h.
#include "sdp_relay/tcp_proxy.h"

#include <fcntl.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "engine/log.h"
#include "engine/sys.h"

namespace rds::sdp {
namespace {

constexpr size_t kBuffer = 64 * 1024;

}  // namespace

TcpProxy::TcpProxy(int a, int b, std::string name) : fd_{a, b}, name_(std::move(name)) {
  for (int fd : fd_) {
    const int flags = sys::Fcntl(fd, F_GETFL, 0);
    if (flags >= 0) sys::Fcntl(fd, F_SETFL, flags | O_NONBLOCK);
    const int one = 1;
    sys::Setsockopt(fd, SOL_SOCKET, SO_OOBINLINE, &one, sizeof one);
  }
  for (Flow& f : flow_) f.buf.resize(kBuffer);
}

TcpProxy::~TcpProxy() {
  if (!done()) Reset();
}

void TcpProxy::OnEvent() {
  if (done()) return;
  // Until neither direction moves (each stops at EAGAIN on one side).
  for (int from : {0, 1}) {
    if (!Move(from)) {
      Reset();
      return;
    }
  }
  if (flow_[0].shut && flow_[1].shut) {
    log::Debug("%s: closed in order", name_);
    for (int& fd : fd_) {
      sys::CloseInternal(fd);
      fd = -1;
    }
  }
}

bool TcpProxy::Flushed(int from) const {
  if (reset_ || fd_[from] < 0) return true;
  const Flow& f = flow_[from];
  if (f.off < f.len) return false;
  int unread = 0;
  if (sys::Ioctl(fd_[from], SIOCINQ, &unread) == 0 && unread > 0) return false;
  return !f.eof || f.shut;
}

bool TcpProxy::Move(int from) {
  Flow& f = flow_[from];
  const int src = fd_[from], dst = fd_[1 - from];
  for (;;) {
    if (f.off == f.len && !f.eof) {
      int at_mark = 0;
      if (sys::Ioctl(src, SIOCATMARK, &at_mark) < 0) at_mark = 0;
      const ssize_t n = sys::Recv(src, f.buf.data(), at_mark ? 1 : f.buf.size(), MSG_DONTWAIT);
      if (n > 0) {
        f.len = static_cast<size_t>(n);
        f.off = 0;
        f.urgent = at_mark != 0;
      } else if (n == 0) {
        f.eof = true;
      } else if (errno == EINTR) {
        continue;
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return true;
      } else {
        log::Info("%s: reset: %s", name_, strerror(errno));
        return false;
      }
    }
    if (f.off < f.len) {
      const ssize_t w = sys::Sendto(dst, f.buf.data() + f.off, f.len - f.off,
                                    MSG_DONTWAIT | MSG_NOSIGNAL | (f.urgent ? MSG_OOB : 0),
                                    nullptr, 0);
      if (w < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
        log::Info("%s: reset: %s", name_, strerror(errno));
        return false;
      }
      f.off += static_cast<size_t>(w);
      bytes_moved_ += static_cast<uint64_t>(w);
      continue;
    }
    if (f.eof && !f.shut) {
      sys::Shutdown(dst, SHUT_WR);
      f.shut = true;
    }
    return true;
  }
}

void TcpProxy::Reset() {
  reset_ = true;
  const struct linger abortive = {1, 0};
  for (int& fd : fd_) {
    if (fd < 0) continue;
    sys::Setsockopt(fd, SOL_SOCKET, SO_LINGER, &abortive, sizeof abortive);
    sys::CloseInternal(fd);
    fd = -1;
  }
}

}  // namespace rds::sdp
