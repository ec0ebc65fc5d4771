// sdp/conversation.cc — see conversation.h.
#include "sdp/conversation.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_format.h"

namespace rds::sdp {

absl::StatusOr<Conversation> Conversation::Create(const Setup& setup) {
  if (setup.our_buf_size <= wire::kBsdhSize || setup.peer_buf_size <= wire::kBsdhSize) {
    return absl::InvalidArgumentError(
        absl::StrFormat("receive buffers of %d and %d bytes carry no data", setup.our_buf_size,
                        setup.peer_buf_size));
  }
  if (setup.peer_bufs <= kReservedCredits || setup.our_bufs <= kReservedCredits) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d and %d receive buffers: each side needs more than %d",
                        setup.our_bufs, setup.peer_bufs, kReservedCredits));
  }
  Conversation c;
  c.our_buf_size_ = setup.our_buf_size;
  c.peer_buf_size_ = setup.peer_buf_size;
  c.posted_ = setup.our_bufs;
  c.peer_bufs_ = setup.peer_bufs;
  c.advertised_ = setup.our_bufs;  // our Hello / HelloAck said so
  return c;
}

int64_t Conversation::tx_credits() const {
  return wire::TxCredits(peer_bufs_, peer_mseq_ack_, next_mseq_);
}

wire::Bsdh Conversation::Stamp(uint8_t mid, uint8_t flags, uint32_t len) {
  wire::Bsdh h;
  h.mid = mid;
  h.flags = flags;
  h.bufs = static_cast<uint16_t>(std::min<uint32_t>(posted_, std::numeric_limits<uint16_t>::max()));
  h.len = len;
  h.mseq = next_mseq_++;
  h.mseq_ack = last_rx_mseq_;
  advertised_ = h.bufs;
  received_since_ad_ = 0;
  return h;
}

absl::Status Conversation::Fail(absl::Status why) {
  aborted_ = true;
  return why;
}

std::optional<wire::Bsdh> Conversation::NextData(size_t available, std::optional<size_t> urgent,
                                                 size_t* payload) {
  *payload = 0;
  if (available == 0 || aborted_ || sent_disconn_ || sent_abort_) return std::nullopt;
  if (tx_credits() <= kReservedCredits) return std::nullopt;
  size_t n = std::min(available, max_payload());
  uint8_t flags = 0;
  if (urgent && *urgent < available && *urgent < n) {
    n = *urgent + 1;  // the urgent byte ends the message
    flags = wire::kFlagOobPres | wire::kFlagOobPend;
  }
  *payload = n;
  return Stamp(wire::kData, flags, static_cast<uint32_t>(wire::kBsdhSize + n));
}

std::optional<wire::Bsdh> Conversation::NextDisConn() {
  if (aborted_ || sent_disconn_ || sent_abort_ || tx_credits() < 1) return std::nullopt;
  sent_disconn_ = true;
  return Stamp(wire::kDisConn, 0, wire::kBsdhSize);
}

std::optional<wire::Bsdh> Conversation::NextAbortConn() {
  if (sent_abort_) return std::nullopt;
  sent_abort_ = true;
  aborted_ = true;
  if (tx_credits() < 1) return std::nullopt;
  return Stamp(wire::kAbortConn, 0, wire::kBsdhSize);
}

std::optional<wire::Bsdh> Conversation::NextCreditUpdate() {
  if (aborted_ || sent_abort_ || tx_credits() < 1) return std::nullopt;
  const uint32_t peer_view =
      advertised_ > received_since_ad_ ? advertised_ - received_since_ad_ : 0;
  if (peer_view >= posted_ || peer_view > posted_ / 2) return std::nullopt;
  return Stamp(wire::kData, 0, wire::kBsdhSize);
}

absl::StatusOr<Conversation::Received> Conversation::OnMessage(
    absl::Span<const uint8_t> message) {
  if (aborted_) return absl::FailedPreconditionError("the connection was aborted");
  if (message.size() < wire::kBsdhSize) {
    return Fail(absl::InvalidArgumentError(
        absl::StrFormat("a message of %d bytes", message.size())));
  }
  const wire::Bsdh h = wire::DecodeBsdh(message.data());
  if (absl::Status s = wire::CheckInBand(h, message.size()); !s.ok()) return Fail(s);
  if (h.mseq != last_rx_mseq_ + 1) {
    return Fail(absl::InvalidArgumentError(
        absl::StrFormat("MSeq %u where %u was due", h.mseq, last_rx_mseq_ + 1)));
  }
  if (posted_ == 0) {
    return Fail(absl::InvalidArgumentError("a message with no receive buffer posted"));
  }
  if (message.size() > our_buf_size_) {
    return Fail(absl::InvalidArgumentError(absl::StrFormat(
        "a message of %d bytes for receive buffers of %d", message.size(), our_buf_size_)));
  }
  // Acknowledgements only move forward, and never past our last message.
  const uint32_t unacked = next_mseq_ - 1 - peer_mseq_ack_;
  if (static_cast<uint32_t>(next_mseq_ - 1 - h.mseq_ack) > unacked) {
    return Fail(absl::InvalidArgumentError(absl::StrFormat(
        "MSeqAck %u outside %u..%u", h.mseq_ack, peer_mseq_ack_, next_mseq_ - 1)));
  }
  last_rx_mseq_ = h.mseq;
  --posted_;
  ++received_since_ad_;
  peer_bufs_ = h.bufs;
  peer_mseq_ack_ = h.mseq_ack;
  Received r;
  switch (h.mid) {
    case wire::kData:
      // After its DisConn the peer still grants credits (its receiving half
      // is open): empty Data only.
      if (received_disconn_ && message.size() > wire::kBsdhSize) {
        return Fail(absl::InvalidArgumentError("data after the peer's DisConn"));
      }
      r.kind = Kind::kData;
      r.payload = message.subspan(wire::kBsdhSize);
      r.urgent = (h.flags & wire::kFlagOobPres) != 0 && !r.payload.empty();
      r.urgent_pending = (h.flags & wire::kFlagOobPend) != 0;
      return r;
    case wire::kDisConn:
      if (received_disconn_) return Fail(absl::InvalidArgumentError("a second DisConn"));
      received_disconn_ = true;
      r.kind = Kind::kDisConn;
      return r;
    case wire::kAbortConn:
      aborted_ = true;
      r.kind = Kind::kAbortConn;
      return r;
    default:
      return Fail(absl::UnimplementedError(absl::StrFormat(
          "MID %#x: only buffer copy is spoken (Data, DisConn, AbortConn)", h.mid)));
  }
}

void Conversation::Reposted(uint32_t n) { posted_ += n; }

}  // namespace rds::sdp
