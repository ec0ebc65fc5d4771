// preload/sdp_fds.h — which fds are SDP sockets (DESIGN.md §11).
//
// An SDP socket's fd is a kernel TCP socket; this table says which fds are
// SDP and holds their SDP-only state (options). It follows the fd: dup, dup2,
// dup3 and F_DUPFD share the entry (one open socket), close and close_range
// drop it, accept on an SDP listener makes a new one. It survives fork (the
// child's copy of memory) and not exec. A process that never made an SDP
// socket pays one relaxed load per call that consults it.
//
// Each change is published for rdsctl (preload/sdp_status.h): every entry's
// fd with what SdpFd::shown says, under the table's lock.
//
// Thread-safety: safe for concurrent use; SdpFd::opts under SdpFd::mu. Lock
// order: the table's lock, then an SdpFd's mu, then its connect state's.
#ifndef RDS_PRELOAD_SDP_FDS_H_
#define RDS_PRELOAD_SDP_FDS_H_

#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "engine/sync.h"
#include "sdp/sockopt.h"
#include "sdp/status_table.h"
#include "sdp_relay/service.h"

namespace rds::preload::sdp_fds {

struct SdpFd {
  explicit SdpFd(int family, bool tcp_fallback = false);
  const int family;  // AF_INET or AF_INET6
  const uint64_t id;  // unique in the process: which socket a slot shows
  // libsdp's "both": a connect that finds no SDP peer goes on over TCP.
  const bool tcp_fallback;
  rds::Mutex mu;
  sdp::SdpOptions opts ABSL_GUARDED_BY(mu);
  // Connected over RDMA verbs: the fd is connected to the relay over
  // loopback, and its names are the SDP connection's.
  std::atomic<bool> verbs{false};
  sockaddr_storage local ABSL_GUARDED_BY(mu) = {};
  sockaddr_storage peer ABSL_GUARDED_BY(mu) = {};
  // A non-blocking connect over verbs under way (or done): its outcome, and
  // whether its error was reported (SO_ERROR, a second connect).
  std::shared_ptr<sdp::Service::ConnectState> connecting ABSL_GUARDED_BY(mu);
  bool error_reported ABSL_GUARDED_BY(mu) = false;
  // What rdsctl shows (sdp/status_table.h); while a non-blocking connect over
  // verbs is under way its state says more (phase, TCP relayed).
  struct Shown {
    sdp::status::State state = sdp::status::State::kOpen;
    sdp::status::Transport transport = sdp::status::Transport::kNone;
    std::string note;
  };
  Shown shown ABSL_GUARDED_BY(mu);
};

// True once this process has had any SDP fd.
bool Any();
// The entry of `fd`, or null.
std::shared_ptr<SdpFd> Find(int fd);
// `fd` is an SDP socket (a new one, or one accepted).
void Mark(int fd, std::shared_ptr<SdpFd> s);
// `fd` was closed (or replaced by dup2 onto it).
void Forget(int fd);
void ForgetRange(unsigned int first, unsigned int last);
// `to` now refers to what `from` refers to (dup family): SDP if `from` is.
void Duplicate(int from, int to);
// Calls fn(fd, entry) for every entry (under the table's lock: fn must not
// call back into the table).
void ForEach(absl::FunctionRef<void(int fd, SdpFd& s)> fn);
// Publishes `fd`'s entry again (its `shown` changed), if `fd` still is
// `entry` (null: whatever it is).
void Publish(int fd, const SdpFd* entry = nullptr);
// The image ends (exit, exec): the published table is removed.
void Withdraw();

// fork: the table's lock is held across it (preload/lifecycle.cc).
void LockForFork();
void UnlockAfterFork();

}  // namespace rds::preload::sdp_fds

#endif  // RDS_PRELOAD_SDP_FDS_H_
