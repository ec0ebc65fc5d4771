// tests/fuzz/fuzz_wire.cc — libFuzzer target for the header codec and the
// extension-header parser/writer (engine/wire).
//
// Input: bytes [0, 48) are a wire header (zero-filled when shorter); the bytes
// after it are a little program for ExtWriter, one opcode byte each:
//   op % 4 == 0  Npaths(be16 from the next 2 bytes)
//   op % 4 == 1  GenNum(be32 from the next 4 bytes)
//   op % 4 == 2  ShimHello()
//   op % 4 == 3  ShimControl(next byte)
// (the program stops when an argument is missing).
//
// Invariants checked (kernel-rds.md §C.2–C.4, engine/wire.h):
//   * Decode reads every field big-endian at the kernel's offsets (checked
//     against a reference reader), and Encode(Decode(b)) == b except that the
//     4 padding bytes are written as zero; Decode(Encode(h)) == h.
//   * ValidateLength accepts exactly h_len <= 1 MiB.
//   * ParseExtHeaders equals a reference parser written from §C.4 (stop at 0,
//     at an unknown type >= 16, at a record running past 16 bytes; unknown
//     types < 16 are zero-length; the shim's 0x20/0x21/0x22 are understood),
//     and depends on nothing but the 16-byte area.
//   * AddShimPayloadRef appends a 0x22 record (9 bytes, big-endian offset)
//     where the reference parse stops iff it fits, keeping everything before
//     it, and the record parses back; StripShimPayloadRef then cuts the area
//     at the first 0x22 record, leaving the records before it.
//   * ExtWriter appends a record iff it fits, writes [type][big-endian data]
//     at the next free offset followed by a terminator when room is left,
//     leaves the header untouched when it refuses, and what it wrote parses
//     back (last record of a type wins).
//   * The special shapes are mutually consistent (handshake ping / pong /
//     shim control are exclusive; a ping never is a handshake ping).
#include <cstring>
#include <optional>

#include "engine/wire.h"
#include "tests/fuzz/fuzz_check.h"

namespace rds::fuzz {
namespace {

using wire::ExtHeaders;
using wire::Header;
using wire::kExtHeaderSpace;
using wire::kHeaderSize;

// §C.4, written from the reference text rather than from wire.cc.
ExtHeaders RefParse(const std::array<uint8_t, kExtHeaderSpace>& a) {
  ExtHeaders out;
  size_t off = 0;
  while (off < kExtHeaderSpace) {
    uint8_t type = a[off];
    size_t n;
    switch (type) {
      case 0: return out;
      case 1: n = 4; break;     // VERSION
      case 2: n = 4; break;     // RDMA
      case 3: n = 8; break;     // RDMA_DEST
      case 4: n = 8; break;     // RDMA_BYTES
      case 5: n = 2; break;     // NPATHS
      case 6: n = 4; break;     // GEN_NUM
      case 8: n = 1; break;     // SPORT_IDX
      case 0x20: n = 0; break;  // shim hello
      case 0x21: n = 1; break;  // shim control
      case 0x22: n = 8; break;  // shim payload by reference
      default:
        if (type >= 16) return out;
        n = 0;  // unknown below 16: zero-length
    }
    if (off + 1 + n > kExtHeaderSpace) return out;
    const uint8_t* d = a.data() + off + 1;
    switch (type) {
      case 1: out.version = static_cast<uint32_t>(RefBe(d, 4)); break;
      case 3: out.rdma_dest = RefBe(d, 4) | (RefBe(d + 4, 4) << 32); break;
      case 5: out.npaths = static_cast<uint16_t>(RefBe(d, 2)); break;
      case 6: out.gen_num = static_cast<uint32_t>(RefBe(d, 4)); break;
      case 8: out.sport_idx = true; break;
      case 0x20: out.shim_hello = true; break;
      case 0x21: out.shim_control = d[0]; break;
      case 0x22: out.shim_payload_ref = RefBe(d, 8); break;
      default: break;
    }
    off += 1 + n;
  }
  return out;
}

// Where the reference parse stops, and the offset of its first 0x22 record
// (kExtHeaderSpace if none).
size_t RefEnd(const std::array<uint8_t, kExtHeaderSpace>& a, size_t* first_ref) {
  *first_ref = kExtHeaderSpace;
  size_t off = 0;
  while (off < kExtHeaderSpace) {
    uint8_t type = a[off];
    if (type == 0) break;
    size_t n;
    switch (type) {
      case 1: case 2: case 6: n = 4; break;
      case 3: case 4: case 0x22: n = 8; break;
      case 5: n = 2; break;
      case 8: case 0x21: n = 1; break;
      case 0x20: n = 0; break;
      default:
        if (type >= 16) return off;
        n = 0;
    }
    if (off + 1 + n > kExtHeaderSpace) return off;
    if (type == 0x22 && *first_ref == kExtHeaderSpace) *first_ref = off;
    off += 1 + n;
  }
  return off;
}

bool SameExt(const ExtHeaders& a, const ExtHeaders& b) {
  return a.version == b.version && a.rdma_dest == b.rdma_dest && a.npaths == b.npaths &&
         a.gen_num == b.gen_num && a.sport_idx == b.sport_idx && a.shim_hello == b.shim_hello &&
         a.shim_control == b.shim_control && a.shim_payload_ref == b.shim_payload_ref;
}

void CheckPayloadRef(const Header& h) {
  const uint64_t v = h.sequence ^ (h.ack << 1);
  size_t first_ref;
  const size_t end = RefEnd(h.exthdr, &first_ref);
  Header c = h;
  const bool ok = wire::AddShimPayloadRef(&c, v);
  FUZZ_CHECK(ok == (end + 9 <= kExtHeaderSpace), "AddShimPayloadRef at %zu: %d", end, ok);
  if (!ok) {
    FUZZ_CHECK(c == h, "a refused payload reference changed the header");
    return;
  }
  Header others = c;
  others.exthdr = h.exthdr;
  FUZZ_CHECK(others == h, "AddShimPayloadRef changed a field outside exthdr");
  FUZZ_CHECK(std::memcmp(c.exthdr.data(), h.exthdr.data(), end) == 0, "earlier records changed");
  FUZZ_CHECK(c.exthdr[end] == 0x22 && RefBe(c.exthdr.data() + end + 1, 8) == v,
             "payload reference record");
  if (end + 9 < kExtHeaderSpace) FUZZ_CHECK(c.exthdr[end + 9] == 0, "no terminator");
  FUZZ_CHECK(RefParse(c.exthdr).shim_payload_ref == v, "the appended reference does not parse");
  FUZZ_CHECK(wire::ParseExtHeaders(c).shim_payload_ref == v, "ParseExtHeaders misses it");
  Header stripped = c;
  wire::StripShimPayloadRef(&stripped);
  const size_t cut = first_ref < end ? first_ref : end;
  FUZZ_CHECK(std::memcmp(stripped.exthdr.data(), c.exthdr.data(), cut) == 0,
             "strip changed the records before the reference");
  for (size_t i = cut; i < kExtHeaderSpace; ++i) {
    FUZZ_CHECK(stripped.exthdr[i] == 0, "strip left bytes after the cut at %zu", cut);
  }
  FUZZ_CHECK(!wire::ParseExtHeaders(stripped).shim_payload_ref, "a reference survived the strip");
}

void CheckCodec(const uint8_t in[kHeaderSize]) {
  Header h = wire::Decode(in);
  FUZZ_CHECK(h.sequence == RefBe(in + 0, 8), "h_sequence");
  FUZZ_CHECK(h.ack == RefBe(in + 8, 8), "h_ack");
  FUZZ_CHECK(h.len == RefBe(in + 16, 4), "h_len");
  FUZZ_CHECK(h.sport == RefBe(in + 20, 2), "h_sport");
  FUZZ_CHECK(h.dport == RefBe(in + 22, 2), "h_dport");
  FUZZ_CHECK(h.flags == in[24] && h.credit == in[25], "h_flags/h_credit");
  FUZZ_CHECK(h.csum == RefBe(in + 30, 2), "h_csum");
  FUZZ_CHECK(std::memcmp(h.exthdr.data(), in + 32, kExtHeaderSpace) == 0, "h_exthdr");

  uint8_t out[kHeaderSize];
  std::memset(out, 0xa5, sizeof(out));  // Encode must write every byte
  wire::Encode(h, out);
  for (size_t i = 0; i < kHeaderSize; ++i) {
    bool padding = i >= 26 && i < 30;
    FUZZ_CHECK(out[i] == (padding ? 0 : in[i]), "Encode(Decode(b)) differs at byte %zu", i);
  }
  FUZZ_CHECK(wire::Decode(out) == h, "Decode(Encode(h)) != h");

  FUZZ_CHECK(wire::ValidateLength(h).ok() == (h.len <= wire::kMaxMessageSize),
             "ValidateLength(%u)", h.len);

  // Extension headers: reference parser, and only the area matters.
  ExtHeaders e = wire::ParseExtHeaders(h);
  FUZZ_CHECK(SameExt(e, RefParse(h.exthdr)), "ParseExtHeaders differs from the §C.4 reference");
  Header only_ext;
  only_ext.exthdr = h.exthdr;
  FUZZ_CHECK(SameExt(e, wire::ParseExtHeaders(only_ext)), "ParseExtHeaders reads outside exthdr");

  // Shapes.
  int handshake_kinds =
      wire::IsHandshakePing(h) + wire::IsHandshakePong(h) + wire::IsShimControl(h);
  FUZZ_CHECK(handshake_kinds <= 1, "ping/pong/control shapes overlap");
  FUZZ_CHECK(!(wire::IsPing(h) && wire::IsHandshakePing(h)), "a ping that is a handshake ping");
  FUZZ_CHECK(wire::IsPing(h) == (h.dport == 0 && !(h.sport == wire::kProbePort)), "IsPing");
  FUZZ_CHECK(wire::IsCongMap(h) == (h.flags == wire::kFlagCongBitmap), "IsCongMap");
}

// Runs the ExtWriter program against a model of the area.
void CheckWriter(const uint8_t in[kHeaderSize], const uint8_t* prog, size_t n) {
  Header h = wire::Decode(in);
  wire::ExtWriter w(&h);
  size_t used = 0;
  bool wrote = false;
  ExtHeaders model;
  size_t pc = 0;
  while (pc < n) {
    uint8_t op = prog[pc++] % 4;
    size_t arg_len = op == 0 ? 2 : op == 1 ? 4 : op == 2 ? 0 : 1;
    if (pc + arg_len > n) break;
    const uint8_t* arg = prog + pc;
    pc += arg_len;
    uint8_t type = op == 0 ? wire::kExtNpaths
                 : op == 1 ? wire::kExtGenNum
                 : op == 2 ? wire::kExtShimHello
                           : wire::kExtShimControl;
    Header before = h;
    bool ok;
    switch (op) {
      case 0: ok = w.Npaths(static_cast<uint16_t>(RefBe(arg, 2))); break;
      case 1: ok = w.GenNum(static_cast<uint32_t>(RefBe(arg, 4))); break;
      case 2: ok = w.ShimHello(); break;
      default: ok = w.ShimControl(arg[0]); break;
    }
    bool fits = used + 1 + arg_len <= kExtHeaderSpace;
    FUZZ_CHECK(ok == fits, "ExtWriter type %u at offset %zu: returned %d, fits %d", type, used,
               ok, fits);
    Header others = h;
    others.exthdr = before.exthdr;
    FUZZ_CHECK(others == before, "ExtWriter changed a field outside exthdr");
    if (!ok) {
      FUZZ_CHECK(h.exthdr == before.exthdr, "a refused record changed the area");
      continue;
    }
    FUZZ_CHECK(h.exthdr[used] == type, "record type byte");
    FUZZ_CHECK(arg_len == 0 || std::memcmp(h.exthdr.data() + used + 1, arg, arg_len) == 0,
               "record data is not big-endian");
    FUZZ_CHECK(std::memcmp(h.exthdr.data(), before.exthdr.data(), used) == 0,
               "an append rewrote earlier records");
    used += 1 + arg_len;
    if (used < kExtHeaderSpace) FUZZ_CHECK(h.exthdr[used] == wire::kExtNone, "no terminator");
    wrote = true;
    switch (op) {
      case 0: model.npaths = static_cast<uint16_t>(RefBe(arg, 2)); break;
      case 1: model.gen_num = static_cast<uint32_t>(RefBe(arg, 4)); break;
      case 2: model.shim_hello = true; break;
      default: model.shim_control = arg[0]; break;
    }
  }
  if (wrote) {
    FUZZ_CHECK(SameExt(wire::ParseExtHeaders(h), model), "written records do not parse back");
    uint8_t enc[kHeaderSize];
    wire::Encode(h, enc);
    FUZZ_CHECK(SameExt(wire::ParseExtHeaders(wire::Decode(enc)), model),
               "written records do not survive Encode/Decode");
  }
}

}  // namespace
}  // namespace rds::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  uint8_t hdr[rds::wire::kHeaderSize] = {};
  size_t n = size < sizeof(hdr) ? size : sizeof(hdr);
  if (n) std::memcpy(hdr, data, n);
  rds::fuzz::CheckCodec(hdr);
  rds::fuzz::CheckPayloadRef(rds::wire::Decode(hdr));
  if (size > sizeof(hdr)) rds::fuzz::CheckWriter(hdr, data + sizeof(hdr), size - sizeof(hdr));
  return 0;
}
