// engine/wire.cc — header codec and extension headers.
#include "engine/wire.h"

#include <algorithm>
#include <cstring>

#include <endian.h>
#include "absl/strings/str_format.h"

namespace rds::wire {
namespace {

// Data size of each extension type, as the kernel's rds_exthdr_size knows it;
// -1 for "no known size" (skipped as zero-length, like 6.12 does).
int ExtSize(uint8_t type) {
  switch (type) {
    case kExtVersion: return 4;
    case kExtRdma: return 4;
    case kExtRdmaDest: return 8;
    case kExtRdmaBytes: return 8;
    case kExtNpaths: return 2;
    case kExtGenNum: return 4;
    case kExtSportIdx: return 1;
    case kExtShimHello: return 0;
    case kExtShimControl: return 1;
    case kExtShimPayloadRef: return 8;
    default: return -1;
  }
}

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
template <typename T>
void Store(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(v));
}
uint16_t Be16(const uint8_t* p) { return be16toh(Load<uint16_t>(p)); }
uint32_t Be32(const uint8_t* p) { return be32toh(Load<uint32_t>(p)); }
uint64_t Be64(const uint8_t* p) { return be64toh(Load<uint64_t>(p)); }
void PutBe16(uint8_t* p, uint16_t v) { Store(p, htobe16(v)); }
void PutBe32(uint8_t* p, uint32_t v) { Store(p, htobe32(v)); }
void PutBe64(uint8_t* p, uint64_t v) { Store(p, htobe64(v)); }

}  // namespace

uint16_t HeaderChecksum(const uint8_t in[kHeaderSize]) {
  uint32_t sum = 0;
  for (size_t off = 0; off < kHeaderSize; off += 2) {
    if (off == 30) continue;  // h_csum itself counts as 0
    sum += static_cast<uint32_t>(in[off]) << 8 | in[off + 1];
  }
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

void SetHeaderChecksum(uint8_t header[kHeaderSize]) {
  PutBe16(header + 30, HeaderChecksum(header));
}

bool HeaderChecksumValid(const uint8_t in[kHeaderSize]) {
  if (Be16(in + 30) == 0) return true;  // "no checksum"
  // As the kernel verifies (ip_fast_csum over all 48 bytes, h_csum included,
  // is 0): the one's-complement sum of every word is 0xffff. This also takes
  // the one value it accepts that HeaderChecksum never produces (0xffff where
  // the other words sum to 0xffff).
  uint32_t sum = 0;
  for (size_t off = 0; off < kHeaderSize; off += 2) {
    sum += static_cast<uint32_t>(in[off]) << 8 | in[off + 1];
  }
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return sum == 0xffff;
}

std::vector<uint8_t> EncodeRecord(const Header& h, const uint8_t* payload, size_t len) {
  std::vector<uint8_t> out(kHeaderSize + len);
  Encode(h, out.data());
  if (len > 0) std::memcpy(out.data() + kHeaderSize, payload, len);
  return out;
}

void Encode(const Header& h, uint8_t out[kHeaderSize]) {
  PutBe64(out + 0, h.sequence);
  PutBe64(out + 8, h.ack);
  PutBe32(out + 16, h.len);
  PutBe16(out + 20, h.sport);
  PutBe16(out + 22, h.dport);
  out[24] = h.flags;
  out[25] = h.credit;
  std::memset(out + 26, 0, 4);  // h_padding
  PutBe16(out + 30, h.csum);
  std::memcpy(out + 32, h.exthdr.data(), kExtHeaderSpace);
}

Header Decode(const uint8_t in[kHeaderSize]) {
  Header h;
  h.sequence = Be64(in + 0);
  h.ack = Be64(in + 8);
  h.len = Be32(in + 16);
  h.sport = Be16(in + 20);
  h.dport = Be16(in + 22);
  h.flags = in[24];
  h.credit = in[25];
  h.csum = Be16(in + 30);
  std::memcpy(h.exthdr.data(), in + 32, kExtHeaderSpace);
  return h;
}

absl::Status ValidateLength(const Header& h) {
  if (h.len > kMaxMessageSize) {
    return absl::InvalidArgumentError(
        absl::StrFormat("h_len %u exceeds the RDS maximum of %u bytes", h.len, kMaxMessageSize));
  }
  return absl::OkStatus();
}

namespace {

// Visits the records of `h` as the kernel parses them: [type][data], the data
// size implied by the type, ended by type 0, a type >= 16 that is not the
// shim's, or the end of the area. Returns where the records end.
template <typename Visit>
size_t ForEachExt(const Header& h, Visit visit) {
  size_t off = 0;
  while (off < kExtHeaderSpace) {
    uint8_t type = h.exthdr[off];
    if (type == kExtNone) break;
    if (type >= 16 && type != kExtShimHello && type != kExtShimControl &&
        type != kExtShimPayloadRef) {
      break;
    }
    int size = std::max(ExtSize(type), 0);
    if (off + 1 + static_cast<size_t>(size) > kExtHeaderSpace) break;
    visit(type, off, h.exthdr.data() + off + 1);  // one past the end when size is 0
    off += 1 + static_cast<size_t>(size);
  }
  return off;
}

}  // namespace

ExtHeaders ParseExtHeaders(const Header& h) {
  ExtHeaders out;
  ForEachExt(h, [&out](uint8_t type, size_t, const uint8_t* d) {
    switch (type) {
      case kExtVersion: out.version = Be32(d); break;
      case kExtRdma: out.rdma_rkey = Be32(d); break;
      case kExtRdmaDest:
        out.rdma_dest = uint64_t{Be32(d)} | (uint64_t{Be32(d + 4)} << 32);
        break;
      case kExtNpaths: out.npaths = Be16(d); break;
      case kExtGenNum: out.gen_num = Be32(d); break;
      case kExtSportIdx: out.sport_idx = true; break;
      case kExtShimHello: out.shim_hello = true; break;
      case kExtShimControl: out.shim_control = d[0]; break;
      case kExtShimPayloadRef: out.shim_payload_ref = Be64(d); break;
      default: break;
    }
  });
  return out;
}

bool ExtWriter::Append(uint8_t type, absl::Span<const uint8_t> data) {
  if (used_ + 1 + data.size() > kExtHeaderSpace) return false;
  h_->exthdr[used_] = type;
  if (!data.empty()) std::memcpy(&h_->exthdr[used_ + 1], data.data(), data.size());
  used_ += 1 + data.size();
  if (used_ < kExtHeaderSpace) h_->exthdr[used_] = kExtNone;
  return true;
}

bool ExtWriter::Npaths(uint16_t n) {
  uint8_t d[2] = {static_cast<uint8_t>(n >> 8), static_cast<uint8_t>(n)};
  return Append(kExtNpaths, d);
}

bool ExtWriter::GenNum(uint32_t gen) {
  uint8_t d[4];
  PutBe32(d, gen);
  return Append(kExtGenNum, d);
}

bool ExtWriter::RdmaDest(uint64_t cookie) {
  uint8_t d[8];
  PutBe32(d, static_cast<uint32_t>(cookie));
  PutBe32(d + 4, static_cast<uint32_t>(cookie >> 32));
  return Append(kExtRdmaDest, d);
}

bool ExtWriter::Rdma(uint32_t rkey) {
  uint8_t d[4];
  PutBe32(d, rkey);
  return Append(kExtRdma, d);
}

bool AddShimPayloadRef(Header* h, uint64_t offset) {
  ExtWriter w(h);
  w.used_ = ForEachExt(*h, [](uint8_t, size_t, const uint8_t*) {});
  uint8_t d[8];
  PutBe64(d, offset);
  return w.Append(kExtShimPayloadRef, d);
}

void StripShimPayloadRef(Header* h) {
  size_t at = kExtHeaderSpace;
  ForEachExt(*h, [&at](uint8_t type, size_t off, const uint8_t*) {
    if (type == kExtShimPayloadRef && at == kExtHeaderSpace) at = off;
  });
  if (at < kExtHeaderSpace) std::memset(h->exthdr.data() + at, 0, kExtHeaderSpace - at);
}

bool ExtWriter::SportIdx() {
  const uint8_t dummy = 0;
  return Append(kExtSportIdx, {&dummy, 1});
}

bool ExtWriter::ShimHello() { return Append(kExtShimHello, {}); }

bool ExtWriter::ShimControl(uint8_t opcode) { return Append(kExtShimControl, {&opcode, 1}); }

}  // namespace rds::wire
