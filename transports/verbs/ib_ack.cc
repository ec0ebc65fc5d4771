// transports/verbs/ib_ack.cc — see ib_ack.h.
#include "transports/verbs/ib_ack.h"

namespace rds::ib {

void AckState::OnMessageReceived(uint64_t seq, bool ack_required) {
  ack_next_ = seq;
  if (ack_required) requested_ = true;
}

uint64_t AckState::Piggyback() {
  requested_ = false;
  return ack_next_;
}

uint64_t AckState::PostAckFrame() {
  requested_ = false;
  frame_in_flight_ = true;
  return ack_next_;
}

std::optional<uint64_t> AckState::OnPeerAck(uint64_t h_ack) {
  if (h_ack <= peer_acked_) return std::nullopt;
  peer_acked_ = h_ack;
  return h_ack;
}

bool AckState::AskForAck(uint32_t len, bool must_ask) {
  if (budget_ == 0 || byte_budget_ < len) {
    budget_ = kPacketBudget;
    byte_budget_ = kByteBudget;
    return true;
  }
  --budget_;
  byte_budget_ -= len;
  return must_ask;
}

void AckState::Reset() {
  ack_next_ = 0;
  requested_ = false;
  frame_in_flight_ = false;
  peer_acked_ = 0;
  budget_ = kPacketBudget;
  byte_budget_ = kByteBudget;
}

}  // namespace rds::ib
