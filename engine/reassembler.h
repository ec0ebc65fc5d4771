// engine/reassembler.h — turns a byte stream back into RDS messages.
//
// Stream transports (TCP, Unix) feed whatever bytes they read; the
// reassembler splits them into [48-byte header][h_len payload] records using
// the wire codec, validating each header before trusting its length. A
// violation (h_len over the RDS limit) is reported once and the stream must
// be dropped: a stream cannot be resynchronised (kernel-rds.md §C.1).
//
// For large payloads the transport can read straight into the message's
// buffer (DirectTarget) instead of copying through its read buffer.
//
// Thread-safety: external synchronization required (one per stream).
#ifndef RDS_ENGINE_REASSEMBLER_H_
#define RDS_ENGINE_REASSEMBLER_H_

#include <cstddef>
#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/message.h"
#include "engine/wire.h"

namespace rds {

class Reassembler {
 public:
  // Called for every complete message, in stream order.
  using Sink = std::function<void(wire::Header&& header, Payload&& payload)>;

  // Consumes all of `bytes`. Returns an error at the first invalid header;
  // after that the reassembler must not be fed again.
  absl::Status Feed(absl::Span<const uint8_t> bytes, const Sink& sink);

  // If a payload of at least `min_size` bytes is partly received, the part
  // still missing; the transport may read into it and then call
  // CommitDirect(n). Empty otherwise.
  absl::Span<uint8_t> DirectTarget(size_t min_size);
  void CommitDirect(size_t n, const Sink& sink);

  // Same-host links: a header with a kExtShimPayloadRef record has no payload
  // bytes on the stream (the payload is in the sender's arena); it is handed
  // to the sink at once with an empty Payload, for the link to resolve.
  void AllowPayloadRefs(bool allow) { payload_refs_ = allow; }

  // True between messages (no partial header or payload held).
  bool AtBoundary() const { return header_have_ == 0 && !in_payload_; }
  // Discards any partial message (used when a stream is reset).
  void Reset();

 private:
  void FinishIfComplete(const Sink& sink);

  uint8_t header_buf_[wire::kHeaderSize];
  size_t header_have_ = 0;
  bool in_payload_ = false;
  bool payload_refs_ = false;
  wire::Header header_;
  Payload payload_;
  size_t payload_have_ = 0;
};

}  // namespace rds

#endif  // RDS_ENGINE_REASSEMBLER_H_
