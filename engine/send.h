// engine/send.h — sendmsg(2) on an RDS socket (kernel send.c).
//
// Validates the call in the kernel's order (kernel-rds.md §A.4), copies the
// payload, admits it against the socket's send buffer (blocking or EAGAIN),
// and hands the message to the engine, which routes and transmits it. Send
// buffer space is returned by ReleaseSendSpace when the message leaves the
// engine's queues.
//
// Thread-safety: safe for concurrent use.
#ifndef RDS_ENGINE_SEND_H_
#define RDS_ENGINE_SEND_H_

#include <sys/socket.h>

#include <cstddef>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "engine/message.h"

namespace rds {

class RdsSocket;

// `msg` is the caller's msghdr already copied into our memory; the buffers it
// points to (name, iov array, iov bases, control) are application memory.
absl::StatusOr<size_t> SendMsg(RdsSocket& rs, const msghdr& msg, int flags);

// The message's bytes no longer count against its sender's send buffer.
void ReleaseSendSpace(Message& m);

// ReleaseSendSpace for many messages at once (an acknowledgement): runs of
// messages from the same socket are released under one hold of its lock, at
// the next message from another socket, Flush() or destruction.
class SendSpaceRelease {
 public:
  SendSpaceRelease() = default;
  SendSpaceRelease(const SendSpaceRelease&) = delete;
  SendSpaceRelease& operator=(const SendSpaceRelease&) = delete;
  ~SendSpaceRelease() { Flush(); }

  void Add(Message& m);
  void Flush();

 private:
  RdsSocket* socket_ = nullptr;
  size_t bytes_ = 0;
  size_t msgs_ = 0;
  absl::InlinedVector<uint32_t, 4> cookies_;  // MSG_ZEROCOPY completions, in order
};

}  // namespace rds

#endif  // RDS_ENGINE_SEND_H_
