// tests/fuzz/fuzz_sdp_wire.cc — libFuzzer target for SDP's codec (sdp/wire.h):
// what a peer's CM private data and in-band messages could hold.
//
// Input: [selector][bytes]. The selector's low two bits pick the decoder:
//   0 — a Hello (CM REQ private data), 1 — a HelloAck (CM REP private data),
//   2 — an in-band message (its BSDH and CheckInBand for the bytes that
//       arrived), 3 — the credit rule on three 32-bit fields.
//
// Invariants, against a reference read here from sdp.md §1.2–1.4 (offsets from
// the start of the private data, big-endian; bytes past the input read as 0):
//   * DecodeHello / DecodeHelloAck succeed exactly when the reference accepts
//     (length at least 32 / 24; MID 0 / 1; major version 2; IP version 4 or 6,
//     a HelloAck's 0 read as 4; MaxAdverts not 0; receive size above 16), and
//     then every field equals the reference's; what they decode re-encodes to
//     a message that decodes to the same fields;
//   * a BSDH decodes to the reference's fields and encodes back to its bytes;
//   * CheckInBand succeeds exactly when at least a BSDH arrived, its length is
//     what arrived and its MID is a known one other than Hello and HelloAck;
//   * TxCredits is the peer's buffers minus our unacknowledged messages,
//     counted modulo 2^32.
#include <cstring>
#include <vector>

#include "sdp/wire.h"
#include "tests/fuzz/fuzz_check.h"

namespace rds::fuzz {
namespace {

namespace w = rds::sdp::wire;

// The input's byte at `off` (0 past its end), and big-endian fields.
struct Bytes {
  const uint8_t* p;
  size_t n;
  uint8_t At(size_t off) const { return off < n ? p[off] : 0; }
  uint64_t Be(size_t off, size_t len) const {
    uint64_t v = 0;
    for (size_t i = 0; i < len; ++i) v = v << 8 | At(off + i);
    return v;
  }
};

void CheckBsdh(const Bytes& b, const w::Bsdh& h) {
  FUZZ_CHECK(h.mid == b.At(0), "BSDH MID");
  FUZZ_CHECK(h.flags == b.At(1), "BSDH flags");
  FUZZ_CHECK(h.bufs == b.Be(2, 2), "BSDH bufs");
  FUZZ_CHECK(h.len == b.Be(4, 4), "BSDH len");
  FUZZ_CHECK(h.mseq == b.Be(8, 4), "BSDH mseq");
  FUZZ_CHECK(h.mseq_ack == b.Be(12, 4), "BSDH mseq_ack");
}

// Version, IP version, MaxAdverts as the decoders must judge them.
bool RefCommonOk(const Bytes& b, uint8_t ip_version) {
  return (b.At(16) >> 4) == 2 && (ip_version == 4 || ip_version == 6) && b.At(19) != 0;
}

void FuzzHello(const Bytes& b) {
  absl::StatusOr<w::Hello> h = w::DecodeHello(absl::MakeConstSpan(b.p, b.n));
  const bool want = b.n >= 32 && b.At(0) == w::kHello && RefCommonOk(b, b.At(17) >> 4) &&
                    b.Be(24, 4) > 16;
  FUZZ_CHECK(h.ok() == want, "DecodeHello accepted %d, the reference %d", h.ok(), want);
  if (!h.ok()) return;
  CheckBsdh(b, h->bsdh);
  FUZZ_CHECK(h->version == b.At(16) && h->ip_version == (b.At(17) >> 4) &&
                 h->caps == (b.At(17) & 0xf) && h->max_adverts == b.At(19),
             "Hello version/IP/caps/MaxAdverts");
  FUZZ_CHECK(h->desired_remote_rcv_size == b.Be(20, 4) && h->local_rcv_size == b.Be(24, 4),
             "Hello sizes");
  FUZZ_CHECK(h->src_port == b.Be(28, 2) && h->ext_max_adverts == b.Be(66, 2), "Hello ports");
  for (size_t i = 0; i < 16; ++i) {
    FUZZ_CHECK(h->src_ip[i] == b.At(32 + i) && h->dst_ip[i] == b.At(48 + i), "Hello addresses");
  }
  const auto again = w::EncodeHello(*h);
  absl::StatusOr<w::Hello> h2 = w::DecodeHello(again);
  FUZZ_CHECK(h2.ok(), "a decoded Hello re-encodes to one that does not decode");
  FUZZ_CHECK(h2->bsdh.mid == h->bsdh.mid && h2->bsdh.bufs == h->bsdh.bufs &&
                 h2->version == h->version && h2->ip_version == h->ip_version &&
                 h2->caps == h->caps && h2->max_adverts == h->max_adverts &&
                 h2->desired_remote_rcv_size == h->desired_remote_rcv_size &&
                 h2->local_rcv_size == h->local_rcv_size && h2->src_port == h->src_port &&
                 h2->src_ip == h->src_ip && h2->dst_ip == h->dst_ip &&
                 h2->ext_max_adverts == h->ext_max_adverts,
             "Hello round trip");
}

void FuzzHelloAck(const Bytes& b) {
  absl::StatusOr<w::HelloAck> h = w::DecodeHelloAck(absl::MakeConstSpan(b.p, b.n));
  const uint8_t ip = (b.At(17) >> 4) == 0 ? 4 : b.At(17) >> 4;  // gen1 left it reserved
  const bool want = b.n >= 24 && b.At(0) == w::kHelloAck && RefCommonOk(b, ip) &&
                    b.Be(20, 4) > 16;
  FUZZ_CHECK(h.ok() == want, "DecodeHelloAck accepted %d, the reference %d", h.ok(), want);
  if (!h.ok()) return;
  CheckBsdh(b, h->bsdh);
  FUZZ_CHECK(h->version == b.At(16) && h->ip_version == ip && h->caps == (b.At(17) & 0xf) &&
                 h->max_adverts == b.At(19) && h->actual_rcv_size == b.Be(20, 4),
             "HelloAck fields");
  const auto again = w::EncodeHelloAck(*h);
  absl::StatusOr<w::HelloAck> h2 = w::DecodeHelloAck(again);
  FUZZ_CHECK(h2.ok() && h2->version == h->version && h2->ip_version == h->ip_version &&
                 h2->caps == h->caps && h2->max_adverts == h->max_adverts &&
                 h2->actual_rcv_size == h->actual_rcv_size,
             "HelloAck round trip");
}

void FuzzInBand(const Bytes& b) {
  if (b.n >= w::kBsdhSize) {
    const w::Bsdh h = w::DecodeBsdh(b.p);
    CheckBsdh(b, h);
    uint8_t out[w::kBsdhSize];
    w::EncodeBsdh(h, out);
    FUZZ_CHECK(std::memcmp(out, b.p, w::kBsdhSize) == 0, "BSDH round trip");
    const uint8_t mid = b.At(0);
    const bool known = (mid >= w::kDisConn && mid <= w::kSuspCommAck) || mid >= w::kSinkAvail;
    const bool want = b.Be(4, 4) == b.n && known;
    const absl::Status s = w::CheckInBand(h, b.n);
    FUZZ_CHECK(s.ok() == want, "CheckInBand(MID %#x) accepted %d, the reference %d", mid, s.ok(),
               want);
  } else {
    w::Bsdh h;  // what arrived is shorter than any header
    FUZZ_CHECK(!w::CheckInBand(h, b.n).ok(), "CheckInBand took %zu bytes", b.n);
  }
}

void FuzzCredits(const Bytes& b) {
  const uint32_t bufs = static_cast<uint32_t>(b.Be(0, 4));
  const uint32_t ack = static_cast<uint32_t>(b.Be(4, 4));
  const uint32_t next = static_cast<uint32_t>(b.Be(8, 4));
  const uint32_t unacked = static_cast<uint32_t>(uint64_t{next} + 0xffffffffu - ack);
  const int64_t got = w::TxCredits(bufs, ack, next);
  FUZZ_CHECK(got == static_cast<int64_t>(bufs) - static_cast<int64_t>(unacked),
             "TxCredits(%u, %u, %u) = %lld", bufs, ack, next, static_cast<long long>(got));
}

}  // namespace
}  // namespace rds::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rds::fuzz;
  if (size == 0) return 0;
  // A copy of exactly the input's size: ASan sees any read past it.
  const std::vector<uint8_t> rest(data + 1, data + size);
  const Bytes b{rest.data(), rest.size()};
  switch (data[0] & 3) {
    case 0: FuzzHello(b); break;
    case 1: FuzzHelloAck(b); break;
    case 2: FuzzInBand(b); break;
    default: FuzzCredits(b); break;
  }
  return 0;
}
