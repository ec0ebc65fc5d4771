// engine/share.h — one RDS socket used by several processes, as the kernel
// shares one struct rds_sock between every descriptor of it: fork children,
// processes that received it over SCM_RIGHTS, and images started by exec
// (DESIGN.md §2.4).
//
// One process *owns* the socket (its lock on byte <id> of sockets.lock,
// engine/registry.h): its engine holds the socket's state, binding and
// queue. Every other process holding a descriptor uses a *remote* RdsSocket
// (`rs.remote`): the engine's socket calls (send.h, recv.h, bind.h, sockopt.h,
// socket.h) forward to the owner over a Unix stream served by a thread of the
// owner (share_server.cc), which runs them as its own calls would, never
// blocking; the caller waits itself — for a message, on the backing fd, which
// the owner keeps readable while its queue is not empty (readiness tokens,
// engine/readiness.h).
//
// When the owner lets go of a socket that other processes may hold — its last
// descriptor closed, exit, exec — it *parks* it: its state goes into a memfd
// and, with an open-file lock that keeps the port taken, is queued on the
// socket's own backing fd (a datagram with SCM_RIGHTS). The parked state then
// lives exactly as long as the socket's file: if no other process holds it,
// the kernel frees it with the file, and the port with it. The next process
// to use the socket takes ownership and *adopts* the state. A socket whose
// owner died without parking (SIGKILL) is adopted afresh, unbound (logged).
//
// Thread-safety: safe for concurrent use.
#ifndef RDS_ENGINE_SHARE_H_
#define RDS_ENGINE_SHARE_H_

#include <sys/socket.h>

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/socket.h"

namespace rds::share {

// ---- A process that received a descriptor (fork, SCM_RIGHTS, exec) ----

// The socket behind backing fd `fd` (id `id`) for this process: the one it
// already has for that id, a remote socket if another process owns it, or,
// if nobody does, the socket adopted from its parked state (or afresh).
absl::StatusOr<std::shared_ptr<RdsSocket>> AttachReceived(uint64_t id, int fd);

// True if `s` says that a forwarded call found the socket adopted by this
// process meanwhile: the caller runs the call locally.
bool Adopted(const absl::Status& s);

// The engine's socket calls on a remote socket.
absl::StatusOr<size_t> SendMsg(RdsSocket& rs, const msghdr& msg, int flags);
absl::StatusOr<size_t> RecvMsg(RdsSocket& rs, int fd, msghdr& msg, int flags);
absl::Status Bind(RdsSocket& rs, const sockaddr* addr, socklen_t len);
absl::Status Connect(RdsSocket& rs, const sockaddr* addr, socklen_t len);
absl::StatusOr<socklen_t> GetName(RdsSocket& rs, bool peer, sockaddr_storage* out);
absl::Status SetSockOpt(RdsSocket& rs, int level, int name, const void* val, socklen_t len);
absl::StatusOr<int> GetSockOpt(RdsSocket& rs, int level, int name, void* val, socklen_t* len);
absl::StatusOr<short> PollMask(RdsSocket& rs);
absl::StatusOr<int> Ioctl(RdsSocket& rs, unsigned long request, void* arg);
// The stream to a remote socket's owner (an internal fd), or -1: it becomes
// readable (end of file) when the owner dies, so a wait for the socket
// includes it.
int OwnerLinkFd(RdsSocket& rs);
// The last descriptor of a remote socket in this process was closed.
void Detach(RdsSocket& rs);

// ---- The owner ----

// The socket may have descriptors in other processes from now on (fork,
// SCM_RIGHTS, a descriptor kept across exec): its release parks it. Only
// sets a flag: callable in a vfork child and in fork handlers.
void MarkShared(RdsSocket& rs);
// The same, from a process that holds `fd`, a descriptor of the socket, and
// may start threads: keeps a copy of it (readiness is drained there) and
// makes this process reachable by the others' calls (its engine's listener).
void MarkShared(RdsSocket& rs, int fd);

// Serves another process's calls on socket `id` over `conn` (an internal fd;
// taken). Called by the engine for a kShareClient hello; never blocks.
void ServeClient(uint64_t id, int conn);

// The owner lets go of `rs` (its last descriptor here was closed, or the
// image ends): parks it if another process may hold it. True if parked (the
// socket is then released here without unbinding); false if this process was
// the last holder, and the caller releases it as usual. When the image ends,
// the kernel nodes' connections the engine holds on the socket's address go
// with it (Engine::HandOnNodeConnections).
bool Park(RdsSocket& rs, bool image_ends = false);

// Before this image ends: parks every socket this process owns that another
// process, or the next image (`exec`), may hold.
void ParkAllBeforeImageEnds(bool exec);

// Fork's prepare handler: holds the thread that serves other processes'
// calls between two rounds, waiting up to `limit` (engine/fork.h);
// ReleaseServerAfterFork, in parent and child, if that returned true.
bool HoldServerForFork(absl::Duration limit);
void ReleaseServerAfterFork();

// Fork child: forgets the server (its thread is the parent's) and the remote
// sockets (each fd is examined again on first use).
void ResetAfterFork();

}  // namespace rds::share

#endif  // RDS_ENGINE_SHARE_H_
