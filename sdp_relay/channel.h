// sdp_relay/channel.h — what a relay needs from the connection under it: a
// reliable, ordered carrier of whole SDP messages with a bounded send ring
// and receive buffers it posts again when told. An RC queue pair over
// rdma-core is the real one (to be built, DESIGN.md §11); tests use an
// in-memory pair. Credits are not the channel's business (sdp::Conversation
// keeps them): a message is sent only into a receive buffer the peer posted.
//
// Thread-safety: the relay's thread only.
#ifndef RDS_SDP_RELAY_CHANNEL_H_
#define RDS_SDP_RELAY_CHANNEL_H_

#include <cstddef>
#include <cstdint>

#include "absl/types/span.h"

namespace rds::sdp {

class MessageChannel {
 public:
  virtual ~MessageChannel() = default;
  // Room in the send ring for one more message.
  virtual bool CanSend() const = 0;
  // Posts one whole message (its BSDH first); only when CanSend(). Every
  // message wakes the peer at once (the relay writes each on immediately;
  // urgent data needs nothing more).
  virtual void Send(absl::Span<const uint8_t> message) = 0;
  // The receive buffer that held message `id` (as given to the relay) is
  // free: post it again. Not called once the channel has closed.
  virtual void Repost(uint64_t id) = 0;
  // Every message sent so far has been delivered into the peer's buffers.
  virtual bool AllSent() const = 0;
  // Ends the connection (a CM disconnect) after every message sent so far
  // is delivered: the peer's relay hears OnClosed after them.
  virtual void Disconnect() = 0;
};

}  // namespace rds::sdp

#endif  // RDS_SDP_RELAY_CHANNEL_H_
