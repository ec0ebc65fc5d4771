// engine/recv.h — the receive path (kernel recv.c): delivery of an incoming
// message into a socket's queue, and recvmsg(2).
//
// Thread-safety: safe for concurrent use.
#ifndef RDS_ENGINE_RECV_H_
#define RDS_ENGINE_RECV_H_

#include <sys/socket.h>

#include <cstddef>

#include "absl/status/statusor.h"
#include "engine/message.h"

namespace rds {

class DirectReceive;
class RdsSocket;

// Queues an arrived message on the destination socket (rds_recv_incoming's
// final step) and updates its receive congestion, under one hold of its lock.
// Drops it (counted) if the socket has been closed. With
// `refuse_over_hard_limit`, a socket far over its receive buffer
// (RdsSocket::OverHardLimitLocked) refuses it instead.
// kQueued takes `m`; kDropped (the socket is closed) and kRefused (over its
// hard limit) leave it; kParked leaves it too: the socket went to another
// process while the message was on its way (RdsSocket::parked), and the
// caller sends it where the socket's port is now.
enum class DeliverResult { kQueued, kDropped, kRefused, kParked };
DeliverResult Deliver(RdsSocket& rs, MessagePtr&& m, bool refuse_over_hard_limit = false);

// A message read into the buffer `offer` lent (engine/direct_receive.h):
// handed to the waiting recvmsg, counted as queued and taken at once. False
// (nothing done) if that offer no longer stands on `rs`.
bool DeliverDirect(RdsSocket& rs, MessagePtr& m, DirectReceive& offer);

// recvmsg(2) (kernel-rds.md §A.5). `msg` is our copy of the caller's msghdr;
// its buffers are application memory. On return, msg.msg_namelen,
// msg.msg_controllen and msg.msg_flags hold what the kernel would write back.
// `fd` is the fd the call was made on (readiness tokens are drained there).
absl::StatusOr<size_t> RecvMsg(RdsSocket& rs, int fd, msghdr& msg, int flags);

}  // namespace rds

#endif  // RDS_ENGINE_RECV_H_
