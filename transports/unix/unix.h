// transports/unix/unix.h — same-host engine links over AF_UNIX streams.
//
// Every engine listens on <rundir>/engine-<pid>.sock (UnixTransport). Links between engines
// on one host use the same framing as TCP (stream/StreamLink). The same
// socket receives TCP connections handed over by the engine that accepted
// them on the rendezvous port (SCM_RIGHTS).
//
// Returned fds are internal, non-blocking and close-on-exec. Link sockets
// (Connect, Accept) get a larger send buffer than the default where allowed
// (WidenSendBuffer): AF_UNIX stream data in flight is bounded by the sender's
// SO_SNDBUF, and at the default 208 KiB (wmem_max) each 1 MiB message took
// five engine wake-ups on each side.
//
// Thread-safety: stateless functions.
#ifndef RDS_TRANSPORTS_UNIX_UNIX_H_
#define RDS_TRANSPORTS_UNIX_UNIX_H_

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace rds::unix_link {

absl::StatusOr<int> Listen(const std::string& path);
int Accept(int listen_fd);
absl::StatusOr<int> Connect(const std::string& path);
// Raises a link socket's send buffer to 4 MiB: SO_SNDBUFFORCE where the
// process may (CAP_NET_ADMIN), else SO_SNDBUF (capped by net.core.wmem_max).
void WidenSendBuffer(int fd);
// The uid of the process at the other end of a connected Unix socket.
absl::StatusOr<uid_t> PeerUid(int fd);

}  // namespace rds::unix_link

#endif  // RDS_TRANSPORTS_UNIX_UNIX_H_
