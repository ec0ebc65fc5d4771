// sdp_relay/tcp_proxy.h — a non-blocking connect under libsdp's "both" that
// found no SDP (DESIGN.md §11): the application's socket is held at the gate
// already, so the relay connects TCP to the destination itself and moves
// the bytes between the two, as they are:
//   bytes        both ways, each direction through a 64 KiB buffer (read
//                only when the other side took the last);
//   urgent data  read at the mark (SO_OOBINLINE, SIOCATMARK), written with
//                MSG_OOB: the mark, SIGURG and POLLPRI at the far end;
//   end of file  shutdown(SHUT_WR) of the other side (half-close);
//   a reset      or any error: both sides reset (SO_LINGER 0 and close).
// Both ends closed in order, or reset: done().
//
// Event-driven: the owner calls OnEvent for either fd (edge-triggered
// EPOLLIN | EPOLLOUT) and destroys it once done().
//
// Not thread-safe: the relay loop's.
#ifndef RDS_SDP_RELAY_TCP_PROXY_H_
#define RDS_SDP_RELAY_TCP_PROXY_H_

#include <cstddef>
#include <string>
#include <vector>

namespace rds::sdp {

class TcpProxy {
 public:
  // Both fds owned (closed as internal fds — engine/sys.h; made non-blocking
  // and SO_OOBINLINE here).
  TcpProxy(int a, int b, std::string name);
  ~TcpProxy();
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  void OnEvent();
  bool done() const { return fd_[0] < 0 && fd_[1] < 0; }
  bool reset() const { return reset_; }
  // What side `from` wrote has all gone on to the other side's kernel socket
  // (which delivers it even after this process ends), its end of file too.
  bool Flushed(int from) const;
  uint64_t bytes_moved() const { return bytes_moved_; }
  int fd(int side) const { return fd_[side]; }

 private:
  // One direction, from fd_[from] to fd_[1 - from].
  struct Flow {
    std::vector<char> buf;
    size_t len = 0, off = 0;
    bool urgent = false;  // buf holds the urgent byte alone
    bool eof = false;     // its source ended
    bool shut = false;    // ... and its destination was told
  };
  // Moves what it can one way; false on an error (both sides reset then).
  bool Move(int from);
  void Reset();

  int fd_[2];
  Flow flow_[2];
  const std::string name_;
  bool reset_ = false;
  uint64_t bytes_moved_ = 0;
};

}  // namespace rds::sdp

#endif  // RDS_SDP_RELAY_TCP_PROXY_H_
