// transports/stream/reassembler.h — turns a byte stream back into RDS messages.
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
#ifndef RDS_TRANSPORTS_STREAM_REASSEMBLER_H_
#define RDS_TRANSPORTS_STREAM_REASSEMBLER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/message.h"
#include "engine/wire.h"

namespace rds {

class Reassembler : public PayloadFiller {
 public:
  // Called for every complete message, in stream order.
  using Sink = std::function<void(wire::Header&& header, Payload&& payload)>;

  // Consumes all of `bytes`. Returns an error at the first invalid header;
  // after that the reassembler must not be fed again.
  absl::Status Feed(absl::Span<const uint8_t> bytes, const Sink& sink);

  // If a payload is partly received and at least `min_size` bytes of it are
  // missing (any number, in lent storage), the part still missing; the
  // transport may read into it and then call CommitDirect(n). Empty
  // otherwise.
  absl::Span<uint8_t> DirectTarget(size_t min_size);
  absl::Status CommitDirect(size_t n, const Sink& sink);

  // Where payloads of at least `min_size` bytes go: `storage` is asked once
  // the header is read and may lend memory of its own (the buffer of a
  // recvmsg waiting for this very message, engine/direct_receive.h) or
  // decline (nullopt: a fresh buffer). Lent storage is given back by
  // destroying the payload — after the sink, or in Reset() — unless the
  // lender takes it back first with MovePayloadToOwnStorage().
  using Storage = std::function<std::optional<Payload>(const wire::Header&, PayloadFiller&)>;
  void SetPayloadStorage(Storage storage, size_t min_size) {
    storage_ = std::move(storage);
    storage_min_ = min_size;
  }
  // True once after a payload in lent storage was handed to the sink.
  bool TakeLentCompleted() {
    const bool was = lent_completed_;
    lent_completed_ = false;
    return was;
  }
  // The payload being received moves to a fresh buffer (what has arrived is
  // copied): its present storage is needed back. Lent storage is application
  // memory: should it have become unreadable, the bytes are lost and the
  // next Feed/CommitDirect fails (the stream must be dropped; the message,
  // never acknowledged, comes again over the next link).
  void MovePayloadToOwnStorage() override;

  // Same-host links: a header with a kExtShimPayloadRef record has no payload
  // bytes on the stream (the payload is in the sender's arena); it is handed
  // to the sink at once with an empty Payload, for the link to resolve.
  void AllowPayloadRefs(bool allow) { payload_refs_ = allow; }

  // Bytes of the payload being received that have not arrived yet, and its
  // whole size (both 0 outside a payload).
  size_t PayloadMissing() const { return in_payload_ ? payload_.size() - payload_have_ : 0; }
  size_t PayloadSize() const { return in_payload_ ? payload_.size() : 0; }
  // True between messages (no partial header or payload held).
  bool AtBoundary() const { return header_have_ == 0 && !in_payload_; }
  // Discards any partial message (used when a stream is reset).
  void Reset();
  // The bytes of a message begun and not finished, as they came on the
  // stream (its header included; empty between messages), and the
  // reassembler starts afresh: a stream handed on mid-message goes on in
  // another reader, fed these first. An error if lent storage lost them.
  absl::StatusOr<std::vector<uint8_t>> TakePartial();

 private:
  void FinishIfComplete(const Sink& sink);

  uint8_t header_buf_[wire::kHeaderSize];
  size_t header_have_ = 0;
  bool in_payload_ = false;
  bool payload_refs_ = false;
  Storage storage_;
  size_t storage_min_ = 0;
  bool lost_ = false;  // lent bytes could not be taken back
  bool lent_completed_ = false;
  wire::Header header_;
  Payload payload_;
  size_t payload_have_ = 0;
};

}  // namespace rds

#endif  // RDS_TRANSPORTS_STREAM_REASSEMBLER_H_
