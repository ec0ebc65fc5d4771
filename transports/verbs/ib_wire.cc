// transports/verbs/ib_wire.cc — see ib_wire.h.
#include "transports/verbs/ib_wire.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"
#include "engine/bytes.h"

namespace rds::ib {

namespace {

size_t LayoutSize(bool v6) { return v6 ? kPrivateDataSizeV6 : kPrivateDataSizeV4; }

void PutAddr(bytes::Writer& w, const RdsAddr& a, bool v6) {
  if (v6) {
    w.Bytes(a.bytes.data(), 16);
  } else {
    w.Bytes(a.bytes.data() + 12, 4);  // the IPv4 address of a mapped one
  }
}

RdsAddr TakeAddr(bytes::Reader& r, bool v6) {
  RdsAddr a;
  if (v6) {
    r.Bytes(a.bytes.data(), 16);
  } else {
    a.bytes[10] = a.bytes[11] = 0xff;  // ::ffff:a.b.c.d
    r.Bytes(a.bytes.data() + 12, 4);
  }
  return a;
}

}  // namespace

std::vector<uint8_t> EncodePrivate(const ConnectPrivate& p, bool v6) {
  bytes::Writer w;
  PutAddr(w, p.saddr, v6);
  PutAddr(w, p.daddr, v6);
  w.U8(static_cast<uint8_t>(p.version >> 8));
  w.U8(static_cast<uint8_t>(p.version & 0xff));
  w.U16(p.minor_mask);
  w.U8(p.tos);
  w.U8(0);   // reserved
  w.U16(0);  // reserved
  w.U64(p.ack_seq);
  w.U32(p.credit);
  w.U32(0);  // tail padding (the kernel zeroes the whole area)
  return w.Take();
}

absl::StatusOr<ConnectPrivate> DecodePrivate(absl::Span<const uint8_t> data, bool v6) {
  if (data.size() < LayoutSize(v6)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "RDS/IB private data of %d bytes, shorter than the %d of its layout", data.size(),
        LayoutSize(v6)));
  }
  bytes::Reader r(data.data(), data.size());
  ConnectPrivate p;
  p.saddr = TakeAddr(r, v6);
  p.daddr = TakeAddr(r, v6);
  const uint8_t major = r.U8();
  const uint8_t minor = r.U8();
  p.version = static_cast<uint16_t>(major << 8 | minor);
  p.minor_mask = r.U16();
  p.tos = r.U8();
  r.U8();
  r.U16();
  p.ack_seq = r.U64();
  p.credit = r.U32();
  return p;
}

std::optional<uint16_t> NegotiateVersion(absl::Span<const uint8_t> data, bool v6) {
  if (data.empty()) return std::nullopt;
  const size_t addrs = v6 ? 32 : 8;
  if (data.size() < LayoutSize(v6) || data[addrs] == 0) return kProtocol4_0;
  const uint8_t major = data[addrs];
  const uint8_t minor = data[addrs + 1];
  const uint16_t mask = static_cast<uint16_t>(data[addrs + 2] << 8 | data[addrs + 3]);
  if (major == 4 && (mask & kSupportedMinorMask) != 0) {
    // 4.0 plus the shifts that clear the common mask: 1 -> 4.0, 2 or 3 -> 4.1.
    uint16_t common = mask & kSupportedMinorMask;
    uint16_t minor_out = 0;
    while (common >>= 1) ++minor_out;
    return static_cast<uint16_t>(kProtocol4_0 + minor_out);
  }
  if (major == 3 && minor == 1) return kProtocol3_1;
  return std::nullopt;
}

void EncodeAckOnly(uint64_t ack, uint8_t out[wire::kHeaderSize]) {
  wire::Header h;
  h.ack = ack;
  wire::Encode(h, out);
  wire::SetHeaderChecksum(out);
}

void FragmentAssembler::Reset() {
  active_ = false;
  payload_ = Payload();
  filled_ = 0;
}

absl::StatusOr<FragmentAssembler::Result> FragmentAssembler::Feed(
    absl::Span<const uint8_t> fragment) {
  if (fragment.size() < wire::kHeaderSize) {
    return absl::DataLossError(
        absl::StrFormat("RDS/IB fragment of %d bytes, shorter than a header", fragment.size()));
  }
  if (!wire::HeaderChecksumValid(fragment.data())) {
    return absl::DataLossError("RDS/IB fragment with a bad header checksum");
  }
  const wire::Header h = wire::Decode(fragment.data());
  const absl::Span<const uint8_t> data = fragment.subspan(wire::kHeaderSize);
  Result out;
  out.ack = h.ack;
  out.credit = h.credit;
  if (IsAckOnly(h, data.size())) return out;
  if (data.size() > kFragmentSize) {
    return absl::DataLossError(
        absl::StrFormat("RDS/IB fragment with %d data bytes, more than %d", data.size(),
                        kFragmentSize));
  }
  if (!active_) {
    if (absl::Status s = wire::ValidateLength(h); !s.ok()) return s;
    active_ = true;
    first_ = h;
    payload_ = Payload(h.len);
    filled_ = 0;
  } else if (h.sequence != first_.sequence || h.len != first_.len ||
             h.sport != first_.sport || h.dport != first_.dport) {
    return absl::DataLossError(absl::StrFormat(
        "RDS/IB fragment of message %d (%d bytes, %d->%d) inside message %d (%d bytes, %d->%d)",
        h.sequence, h.len, h.sport, h.dport, first_.sequence, first_.len, first_.sport,
        first_.dport));
  }
  const uint32_t remaining = first_.len - filled_;
  const uint32_t want = std::min(remaining, kFragmentSize);
  if (data.size() < want) {
    return absl::DataLossError(absl::StrFormat(
        "RDS/IB fragment with %d data bytes where %d were due", data.size(), want));
  }
  if (want > 0) std::memcpy(payload_.data() + filled_, data.data(), want);
  filled_ += want;
  if (filled_ < first_.len) return out;
  out.header = first_;
  out.payload = std::move(payload_);
  Reset();
  return out;
}

}  // namespace rds::ib
