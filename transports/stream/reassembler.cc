// transports/stream/reassembler.cc — byte stream to messages.
#include "transports/stream/reassembler.h"

#include <algorithm>
#include <cstring>

#include "engine/usercopy.h"

namespace rds {

namespace {

absl::Status LostError() {
  return absl::DataLossError("a payload's bytes were lost (the buffer lent for it became unreadable)");
}

}  // namespace

absl::Status Reassembler::Feed(absl::Span<const uint8_t> bytes, const Sink& sink) {
  if (lost_) return LostError();
  size_t off = 0;
  while (off < bytes.size()) {
    if (!in_payload_) {
      size_t take = std::min(wire::kHeaderSize - header_have_, bytes.size() - off);
      std::memcpy(header_buf_ + header_have_, bytes.data() + off, take);
      header_have_ += take;
      off += take;
      if (header_have_ < wire::kHeaderSize) break;
      header_ = wire::Decode(header_buf_);
      if (absl::Status s = wire::ValidateLength(header_); !s.ok()) return s;
      header_have_ = 0;
      if (payload_refs_ && wire::HasExtHeaders(header_) &&
          wire::ParseExtHeaders(header_).shim_payload_ref) {
        wire::Header h = header_;
        sink(std::move(h), Payload());
        continue;
      }
      in_payload_ = true;
      std::optional<Payload> lent;
      if (storage_ && header_.len >= storage_min_ && header_.len > 0) lent = storage_(header_, *this);
      payload_ = lent ? std::move(*lent) : Payload(header_.len);
      payload_have_ = 0;
      FinishIfComplete(sink);
      continue;
    }
    size_t take = std::min(payload_.size() - payload_have_, bytes.size() - off);
    if (payload_.owner() == nullptr) {
      std::memcpy(payload_.data() + payload_have_, bytes.data() + off, take);
    } else if (!usercopy::ToUser(payload_.data() + payload_have_, bytes.data() + off, take).ok()) {
      // Lent application memory that cannot be written: into a buffer of our own.
      MovePayloadToOwnStorage();
      if (lost_) return LostError();
      std::memcpy(payload_.data() + payload_have_, bytes.data() + off, take);
    }
    payload_have_ += take;
    off += take;
    FinishIfComplete(sink);
  }
  return absl::OkStatus();
}

absl::Span<uint8_t> Reassembler::DirectTarget(size_t min_size) {
  if (!in_payload_) return {};
  const size_t missing = PayloadMissing();
  // Lent storage is read into to the end, however little is left: read
  // through read_buf_, its tail would bring the next message's header along
  // — after the lender's offer is spent.
  if (missing < min_size && payload_.owner() == nullptr) return {};
  return {payload_.data() + payload_have_, missing};
}

absl::Status Reassembler::CommitDirect(size_t n, const Sink& sink) {
  if (lost_) return LostError();
  payload_have_ += n;
  FinishIfComplete(sink);
  return absl::OkStatus();
}

void Reassembler::FinishIfComplete(const Sink& sink) {
  if (!in_payload_ || payload_have_ < payload_.size()) return;
  in_payload_ = false;
  wire::Header h = header_;
  Payload p = std::move(payload_);
  payload_ = Payload();
  payload_have_ = 0;
  if (p.owner() != nullptr) lent_completed_ = true;
  sink(std::move(h), std::move(p));
}

void Reassembler::MovePayloadToOwnStorage() {
  if (!in_payload_) return;
  Payload own(payload_.size());
  if (payload_have_ > 0 && !usercopy::FromUser(own.data(), payload_.data(), payload_have_).ok()) {
    lost_ = true;
  }
  payload_ = std::move(own);
}

absl::StatusOr<std::vector<uint8_t>> Reassembler::TakePartial() {
  std::vector<uint8_t> bytes;
  if (in_payload_) {
    if (payload_.owner() != nullptr) MovePayloadToOwnStorage();
    if (lost_) return LostError();
    // The header's bytes stay in header_buf_ while its payload arrives.
    bytes.assign(header_buf_, header_buf_ + wire::kHeaderSize);
    bytes.insert(bytes.end(), payload_.data(), payload_.data() + payload_have_);
  } else {
    bytes.assign(header_buf_, header_buf_ + header_have_);
  }
  Reset();
  return bytes;
}

void Reassembler::Reset() {
  lost_ = false;
  header_have_ = 0;
  in_payload_ = false;
  payload_ = Payload();
  payload_have_ = 0;
}

}  // namespace rds
