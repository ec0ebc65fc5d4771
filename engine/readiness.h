// engine/readiness.h — the RDS fd itself: its identity and its kernel readiness.
//
// The fd an application holds for an RDS socket is an AF_UNIX SOCK_DGRAM
// socket bound to the abstract name "\0rds-preload/v1/<id as 16 hex digits>"
// (DESIGN.md §2.1). The name identifies it in any process that receives it;
// the socket carries its network namespace (SIOCGSKNS).
//
// While a socket is registered in an epoll set, the engine keeps "readiness
// tokens" (1-byte datagrams) queued on that fd exactly while the RDS socket is
// readable, plus one per arriving message so edge-triggered epoll sees an
// edge per arrival (DESIGN.md §2.3).
//
// Thread-safety: safe for concurrent use.
#ifndef RDS_ENGINE_READINESS_H_
#define RDS_ENGINE_READINESS_H_

#include <sys/socket.h>
#include <sys/un.h>

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "engine/sync.h"

namespace rds {

class NetNs;

// Creates the backing fd for a new RDS socket with the given SOCK_NONBLOCK /
// SOCK_CLOEXEC flags, bound to the name of a fresh id (this process's random
// base plus a counter: consecutive within a process, see readiness.cc).
struct BackingFd {
  int fd;
  uint64_t id;
};
absl::StatusOr<BackingFd> CreateBackingFd(int flags);

// The lock of the id counter, taken across fork() (engine/fork.cc); in the
// child, the next id comes from a new base.
rds::Mutex& SocketIdMutex();
void ResetSocketIdsAfterFork();
// The next id comes from a new base (its id is already owned elsewhere).
void NewSocketIdBase();

// The id of an RDS backing fd, or nullopt if `fd` is not one.
std::optional<uint64_t> RecognizeBackingFd(int fd);

// A socket that sends the tokens of one RDS socket, created in `ns` (where
// the name lives). One per epoll-watched socket: a Unix datagram is charged
// to its sender until read, so a shared sender would run out of buffer with
// many watched sockets and lose tokens. Returns an internal fd, or -1.
int CreateTokenSender(NetNs& ns);

// Queues one readiness token on socket `id`'s fd. Returns false if it could
// not (the fd is readable anyway; only an extra edge is lost).
bool PostReadinessToken(int sender_fd, uint64_t id);

// At most: a parked state, its port's lock and the paths of the kernel
// nodes' connections riding with it (share_wire::kMaxHandedNodePaths).
inline constexpr int kMaxBackingFdPassed = 18;
// Queues the datagram `data` with `fds` (at most kMaxBackingFdPassed)
// attached as SCM_RIGHTS on socket `id`'s backing fd, from `sender_fd` (a
// CreateTokenSender socket): how a parked socket's state is left on its own
// file (engine/share.h). False with errno if not; ECONNREFUSED means no
// process holds the socket.
bool SendToBackingFd(int sender_fd, uint64_t id, const void* data, size_t n, const int* fds,
                     int nfds);

// True while some descriptor of socket `id`'s backing fd exists, in any
// process (or in flight over SCM_RIGHTS). `sender_fd` is a fresh socket
// from CreateTokenSender (it is connected by the test).
bool BackingFdInUse(int sender_fd, uint64_t id);

// Removes every queued token from `fd`. Returns how many were removed.
int DrainReadinessTokens(int fd);

}  // namespace rds

#endif  // RDS_ENGINE_READINESS_H_
