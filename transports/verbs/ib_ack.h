// transports/verbs/ib_ack.h — RDS acknowledgements on an RDMA connection, as kernel
// rds_rdma keeps them (../shared/reference/rds-ib.md §3, §8 items 12–13). Over TCP a
// kernel frees a message once TCP acknowledged its bytes; over RDMA only an RDS-level
// acknowledgement frees it: h_ack, the sequence of the last complete non-congestion
// message received (cumulative: RC keeps order), piggybacked on every header sent, or
// carried by an ack-only frame when the peer asked (ACK_REQUIRED). The kernel has no ack
// timer, so a sender must ask often enough: this class also says when our message must
// carry ACK_REQUIRED.
//
// Thread-safety: none; one per connection, used by its link.
#ifndef RDS_TRANSPORTS_VERBS_IB_ACK_H_
#define RDS_TRANSPORTS_VERBS_IB_ACK_H_

#include <cstdint>
#include <optional>

namespace rds::ib {

class AckState {
 public:
  // The kernel's max_unacked_packets and max_unacked_bytes: a message that
  // finds either budget spent asks for an acknowledgement and refills both.
  static constexpr int kPacketBudget = 8;
  static constexpr uint64_t kByteBudget = 16u << 20;

  // --- What we acknowledge.
  // A message (not a congestion map) completed: its sequence is what we
  // acknowledge from now on, even if the engine drops it as a duplicate (the
  // peer frees its retransmissions only so); `ack_required` asks for an
  // ack-only frame.
  void OnMessageReceived(uint64_t seq, bool ack_required);
  // The h_ack of a header we send now; it answers a pending request.
  uint64_t Piggyback();
  // An ack-only frame is due: asked for, not answered by a piggyback, and
  // none in flight (at most one, as the kernel keeps).
  bool AckFrameDue() const { return requested_ && !frame_in_flight_; }
  // The ack-only frame is being posted: its h_ack.
  uint64_t PostAckFrame();
  // Its send completed: another may go.
  void OnAckFrameSent() { frame_in_flight_ = false; }

  // --- What the peer acknowledges.
  // The h_ack of any header received (ack-only frames included): the new
  // cumulative acknowledgement if it advanced, else nullopt (0 is "nothing";
  // a smaller value is ignored, as the kernel ignores it).
  std::optional<uint64_t> OnPeerAck(uint64_t h_ack);

  // --- What we ask for.
  // Whether the message of `len` bytes we are about to send carries
  // ACK_REQUIRED: by the budgets (the first message of a connection, then
  // every ninth, or one that would pass 16 MiB unacknowledged), or because
  // the caller must have it acknowledged soon (a retransmission, a sender
  // whose buffer is half full, or the last message of a burst: nothing else
  // is queued, and an idle kernel would never acknowledge it).
  bool AskForAck(uint32_t len, bool must_ask);

  // The connection was replaced: acknowledgements start afresh (the kernel
  // resets i_ack_next and i_ack_recv to 0), the budget to a full one.
  void Reset();

 private:
  uint64_t ack_next_ = 0;   // last complete message received
  bool requested_ = false;  // the peer asked, and no header has answered
  bool frame_in_flight_ = false;
  uint64_t peer_acked_ = 0;  // highest h_ack applied
  int budget_ = 0;           // 0 on a new connection: its first message asks
  uint64_t byte_budget_ = 0;
};

}  // namespace rds::ib

#endif  // RDS_TRANSPORTS_VERBS_IB_ACK_H_
