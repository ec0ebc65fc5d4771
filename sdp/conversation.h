// sdp/conversation.h — one SDP connection's in-band protocol in buffer-copy
// mode (sdp.md §1.2, §1.5, §1.6), without a queue pair or a socket: which
// message may be posted next, and what a received one means. The relay that
// moves the bytes (between the application's socket and the queue pair, to be
// built: DESIGN.md §11) asks for each message's BSDH before it posts it and
// hands every received message here.
//
// The rules (OFED gen2's, the de-facto standard):
// * Sequence numbers: our first in-band message has MSeq 1 (Hello and
//   HelloAck carry 0), then +1 per message; every BSDH acknowledges the
//   peer's last MSeq. RC delivers in order: any other MSeq is an error.
// * Credits: a message goes only into a receive buffer the peer has posted
//   (wire::TxCredits over the peer's latest BSDH). Data leaves
//   kReservedCredits unused, so that a credit update, DisConn or AbortConn can
//   always go; a peer that posts no more than that is refused at set-up.
// * Our receive buffers: each received message takes one; the relay reposts
//   it once the bytes are out of it (Reposted). Every BSDH's Bufs says how
//   many are posted. When the peer's view of them (the last Bufs we sent
//   minus the messages it sent since) has fallen to half of what is posted,
//   an empty Data message tells it (NextCreditUpdate).
// * Urgent data: the Data message whose last byte is the urgent byte carries
//   OOB_PRES | OOB_PEND.
// * Close: DisConn after our last data (the application's FIN), AbortConn for
//   a reset. A received DisConn ends the peer's stream; data after it (credit
//   updates, empty, still come: that side still receives), or any message
//   after AbortConn, is an error.
// * Buffer copy only: the zero-copy messages (SrcAvail, SinkAvail and their
//   answers) and the rest are errors — both ends are this shim (sdp.md §0:
//   no other SDP stack can reach the RDMA CM's TCP port space).
// A protocol error leaves the conversation aborted: the relay resets the
// connection (the application sees ECONNRESET).
//
// Not thread-safe: one relay owns it.
#ifndef RDS_SDP_CONVERSATION_H_
#define RDS_SDP_CONVERSATION_H_

#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "sdp/wire.h"

namespace rds::sdp {

class Conversation {
 public:
  static constexpr uint32_t kReservedCredits = 2;

  struct Setup {
    uint32_t our_bufs = 0;       // receive buffers posted when the connection comes up
    uint32_t our_buf_size = 0;   // bytes each, BSDH included (our Hello's LocalRcvSz)
    uint32_t peer_bufs = 0;      // the Bufs of the peer's Hello / HelloAck
    uint32_t peer_buf_size = 0;  // its LocalRcvSz / ActRcvSz
  };
  // InvalidArgument when either side's buffers cannot carry a byte, or the
  // peer's credits would all be reserved.
  static absl::StatusOr<Conversation> Create(const Setup& setup);

  // --- Sending. Each returns the BSDH of the message to post now (counted as
  // posted), or nullopt when it may not go now.
  // A Data message with the next bytes of the stream: `available` bytes are
  // waiting, `urgent` is the index among them of an urgent byte (the message
  // then ends with it). *payload is set to the bytes the message carries.
  // Nothing after DisConn or AbortConn.
  std::optional<wire::Bsdh> NextData(size_t available, std::optional<size_t> urgent,
                                     size_t* payload);
  // DisConn, once, after the last Data.
  std::optional<wire::Bsdh> NextDisConn();
  // AbortConn, once; nullopt without a credit (the relay disconnects anyway).
  std::optional<wire::Bsdh> NextAbortConn();
  // An empty Data message when the peer's view of our buffers has fallen to
  // half of what is posted (and a credit allows it).
  std::optional<wire::Bsdh> NextCreditUpdate();

  // --- Receiving.
  enum class Kind { kData, kDisConn, kAbortConn };
  struct Received {
    Kind kind = Kind::kData;
    absl::Span<const uint8_t> payload;  // Data's bytes (inside the message given)
    bool urgent = false;                // OOB_PRES: the payload's last byte is urgent
    bool urgent_pending = false;        // OOB_PEND: signal the owner (SIGURG)
  };
  // One received message, whole (BSDH included). An error is a protocol
  // violation; the conversation is aborted then.
  absl::StatusOr<Received> OnMessage(absl::Span<const uint8_t> message);
  // `n` receive buffers are posted again.
  void Reposted(uint32_t n);

  // --- State.
  int64_t tx_credits() const;
  // NextData would give a message (given bytes to send).
  bool can_send_data() const {
    return !aborted_ && !sent_disconn_ && !sent_abort_ && tx_credits() > kReservedCredits;
  }
  uint32_t posted() const { return posted_; }
  // The largest payload of one of our Data messages.
  size_t max_payload() const { return peer_buf_size_ - wire::kBsdhSize; }
  bool sent_disconn() const { return sent_disconn_; }
  // Messages we have sent (any kind).
  uint32_t messages_sent() const { return next_mseq_ - 1; }
  bool received_disconn() const { return received_disconn_; }
  bool aborted() const { return aborted_; }
  // Both streams ended in order: the connection may be torn down.
  bool closed() const { return sent_disconn_ && received_disconn_; }

 private:
  Conversation() = default;
  wire::Bsdh Stamp(uint8_t mid, uint8_t flags, uint32_t len);
  absl::Status Fail(absl::Status why);

  uint32_t our_buf_size_ = 0;
  uint32_t peer_buf_size_ = 0;
  uint32_t posted_ = 0;
  // From the peer's latest BSDH.
  uint32_t peer_bufs_ = 0;
  uint32_t peer_mseq_ack_ = 0;
  uint32_t next_mseq_ = 1;        // of our next message
  uint32_t last_rx_mseq_ = 0;     // the peer's last message
  uint32_t advertised_ = 0;       // the Bufs of our last message
  uint32_t received_since_ad_ = 0;  // the peer's messages since then
  bool sent_disconn_ = false;
  bool sent_abort_ = false;
  bool received_disconn_ = false;
  bool aborted_ = false;
};

}  // namespace rds::sdp

#endif  // RDS_SDP_CONVERSATION_H_
