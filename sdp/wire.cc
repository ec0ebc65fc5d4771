// sdp/wire.cc — BSDH, Hello and HelloAck encoding.
#include "sdp/wire.h"

#include <endian.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"

namespace rds::sdp::wire {
namespace {

void Put16(uint8_t* p, uint16_t v) {
  v = htobe16(v);
  std::memcpy(p, &v, sizeof(v));
}
void Put32(uint8_t* p, uint32_t v) {
  v = htobe32(v);
  std::memcpy(p, &v, sizeof(v));
}
uint16_t Get16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return be16toh(v);
}
uint32_t Get32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return be32toh(v);
}

// Bytes 16-19, alike in Hello and HelloAck: version, IP version | capabilities,
// reserved, MaxAdverts.
struct Common {
  uint8_t version, ip_version, caps, max_adverts;
};

void PutCommon(uint8_t* a, const Common& c) {
  a[16] = c.version;
  a[17] = static_cast<uint8_t>((c.ip_version << 4) | (c.caps & 0xf));
  a[19] = c.max_adverts;
}

Common GetCommon(const uint8_t* a) {
  return Common{a[16], static_cast<uint8_t>(a[17] >> 4), static_cast<uint8_t>(a[17] & 0xf), a[19]};
}

// The private data as received, padded with zeros to `size`.
template <size_t N>
std::array<uint8_t, N> Padded(absl::Span<const uint8_t> in) {
  std::array<uint8_t, N> a = {};
  std::memcpy(a.data(), in.data(), std::min(in.size(), N));
  return a;
}

absl::Status CheckCommon(const char* what, uint8_t version, uint8_t ip_version,
                         uint8_t max_adverts) {
  if ((version >> 4) != kMajorVersion) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: SDP version %d.%d (only 2.x)", what, version >> 4, version & 0xf));
  }
  if (ip_version != 4 && ip_version != 6) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: IP version %d", what, ip_version));
  }
  if (max_adverts == 0) return absl::InvalidArgumentError(absl::StrCat(what, ": MaxAdverts 0"));
  return absl::OkStatus();
}

}  // namespace

void EncodeBsdh(const Bsdh& h, uint8_t* out) {
  out[0] = h.mid;
  out[1] = h.flags;
  Put16(out + 2, h.bufs);
  Put32(out + 4, h.len);
  Put32(out + 8, h.mseq);
  Put32(out + 12, h.mseq_ack);
}

Bsdh DecodeBsdh(const uint8_t* in) {
  Bsdh h;
  h.mid = in[0];
  h.flags = in[1];
  h.bufs = Get16(in + 2);
  h.len = Get32(in + 4);
  h.mseq = Get32(in + 8);
  h.mseq_ack = Get32(in + 12);
  return h;
}

std::array<uint8_t, kHelloSize> EncodeHello(const Hello& h) {
  std::array<uint8_t, kHelloSize> a = {};
  Bsdh b = h.bsdh;
  b.mid = kHello;
  b.len = kHelloSize;
  EncodeBsdh(b, a.data());
  PutCommon(a.data(), {h.version, h.ip_version, h.caps, h.max_adverts});
  Put32(&a[20], h.desired_remote_rcv_size);
  Put32(&a[24], h.local_rcv_size);
  Put16(&a[28], h.src_port);
  std::memcpy(&a[32], h.src_ip.data(), 16);
  std::memcpy(&a[48], h.dst_ip.data(), 16);
  Put16(&a[66], h.ext_max_adverts);
  return a;
}

std::array<uint8_t, kHelloAckSize> EncodeHelloAck(const HelloAck& h) {
  std::array<uint8_t, kHelloAckSize> a = {};
  Bsdh b = h.bsdh;
  b.mid = kHelloAck;
  b.len = kHelloAckSize;
  EncodeBsdh(b, a.data());
  PutCommon(a.data(), {h.version, h.ip_version, h.caps, h.max_adverts});
  Put32(&a[20], h.actual_rcv_size);
  return a;
}

absl::StatusOr<Hello> DecodeHello(absl::Span<const uint8_t> in) {
  if (in.size() < kHelloMinSize) {
    return absl::InvalidArgumentError(absl::StrFormat("Hello of %d bytes", in.size()));
  }
  const auto a = Padded<kHelloSize>(in);
  Hello h;
  h.bsdh = DecodeBsdh(a.data());
  if (h.bsdh.mid != kHello) {
    return absl::InvalidArgumentError(absl::StrFormat("MID %#x where a Hello was due", h.bsdh.mid));
  }
  const Common c = GetCommon(a.data());
  h.version = c.version, h.ip_version = c.ip_version, h.caps = c.caps, h.max_adverts = c.max_adverts;
  h.desired_remote_rcv_size = Get32(&a[20]);
  h.local_rcv_size = Get32(&a[24]);
  h.src_port = Get16(&a[28]);
  std::memcpy(h.src_ip.data(), &a[32], 16);
  std::memcpy(h.dst_ip.data(), &a[48], 16);
  h.ext_max_adverts = Get16(&a[66]);
  if (absl::Status s = CheckCommon("Hello", h.version, h.ip_version, h.max_adverts); !s.ok()) {
    return s;
  }
  if (h.local_rcv_size <= kBsdhSize) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Hello: receive buffers of %d bytes", h.local_rcv_size));
  }
  return h;
}

absl::StatusOr<HelloAck> DecodeHelloAck(absl::Span<const uint8_t> in) {
  if (in.size() < kHelloAckMinSize) {
    return absl::InvalidArgumentError(absl::StrFormat("HelloAck of %d bytes", in.size()));
  }
  const auto a = Padded<kHelloAckSize>(in);
  HelloAck h;
  h.bsdh = DecodeBsdh(a.data());
  if (h.bsdh.mid != kHelloAck) {
    return absl::InvalidArgumentError(
        absl::StrFormat("MID %#x where a HelloAck was due", h.bsdh.mid));
  }
  const Common c = GetCommon(a.data());
  h.version = c.version, h.ip_version = c.ip_version, h.caps = c.caps, h.max_adverts = c.max_adverts;
  h.actual_rcv_size = Get32(&a[20]);
  // gen1 left IpVer reserved (0) in the HelloAck: take it as "the Hello's".
  if (h.ip_version == 0) h.ip_version = 4;
  if (absl::Status s = CheckCommon("HelloAck", h.version, h.ip_version, h.max_adverts);
      !s.ok()) {
    return s;
  }
  if (h.actual_rcv_size <= kBsdhSize) {
    return absl::InvalidArgumentError(
        absl::StrFormat("HelloAck: receive buffers of %d bytes", h.actual_rcv_size));
  }
  return h;
}

int64_t TxCredits(uint32_t peer_bufs, uint32_t peer_mseq_ack, uint32_t next_mseq) {
  // Our messages the peer has not acknowledged: next_mseq - 1 - peer_mseq_ack
  // (modulo 2^32, sequence numbers wrap).
  const uint32_t unacked = next_mseq - 1 - peer_mseq_ack;
  return static_cast<int64_t>(peer_bufs) - static_cast<int64_t>(unacked);
}

absl::Status CheckInBand(const Bsdh& h, size_t received) {
  if (received < kBsdhSize) {
    return absl::InvalidArgumentError(absl::StrFormat("a message of %d bytes", received));
  }
  if (h.len != received) {
    return absl::InvalidArgumentError(
        absl::StrFormat("BSDH length %d, %d bytes arrived", h.len, received));
  }
  switch (h.mid) {
    case kHello:
    case kHelloAck:
      return absl::InvalidArgumentError(
          absl::StrFormat("MID %#x in band (it belongs to the connection's set-up)", h.mid));
    case kDisConn:
    case kAbortConn:
    case kSendSm:
    case kRdmaWrCompl:
    case kRdmaRdCompl:
    case kModeChange:
    case kSrcAvailCancel:
    case kSinkAvailCancel:
    case kSinkCancelAck:
    case kChRcvBuf:
    case kChRcvBufAck:
    case kSuspComm:
    case kSuspCommAck:
    case kSinkAvail:
    case kSrcAvail:
    case kData:
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(absl::StrFormat("unknown MID %#x", h.mid));
  }
}

}  // namespace rds::sdp::wire
