// tests/fuzz/fuzz_control.cc — libFuzzer target for the shim's hello and
// control decoders (engine/control).
//
// Input: bytes [0, 48) are a wire header (zero-filled when shorter), the rest
// is the payload. Both decoders get the pair; the same bytes also seed a
// Hello and a Control value for an encode -> decode round trip.
//
// The protocol grows (new hello kinds and opcodes, optional trailing fields,
// variable data), so what the decoders accept is learnt once from the
// encoder: the accepted kinds, results and opcodes (each probed with the
// other fields at their defaults), and the accepted payload lengths (the
// default encoding cut or zero-extended to every length up to 32 bytes past
// its end). The invariants then are:
//   * DecodeHello succeeds exactly when IsHello(header), the payload starts
//     with the encoder's magic and version, names an accepted kind and result,
//     and has an accepted length: each field is judged independently of the
//     others, and no content but those fields matters.
//   * DecodeControl succeeds exactly when the header is port 1 -> port 1 with a
//     0x21 extension carrying an accepted opcode and the payload has an
//     accepted length.
//   * Re-encoding a decoded value agrees with the input payload on every byte
//     both have (fields absent from the input re-encode as their defaults),
//     with a header that is again a hello (a control message with the same
//     opcode), and re-decoding that encoding reproduces it byte for byte.
//   * EncodeHello/EncodeControl of any field values decode back to the same
//     values; a hello is shaped as a handshake pong iff it is a reply (ping
//     otherwise) and carries NPATHS=1 and GEN_NUM = gen (DESIGN.md §3.1).
#include <algorithm>
#include <cstring>
#include <set>
#include <vector>

#include "engine/control.h"
#include "tests/fuzz/fuzz_check.h"

namespace rds::fuzz {
namespace {

using control::Control;
using control::Hello;
using control::HelloKind;
using control::HelloResult;
using control::Op;
using wire::kHeaderSize;

bool SameHello(const Hello& a, const Hello& b) {
  return a.kind == b.kind && a.result == b.result && a.pid == b.pid && a.gen == b.gen &&
         a.uid == b.uid && a.ns == b.ns && a.from_addr == b.from_addr && a.to_addr == b.to_addr &&
         a.target_pid == b.target_pid && a.query_port == b.query_port &&
         a.answer_pid == b.answer_pid;
}

bool SameControl(const Control& a, const Control& b) {
  return a.op == b.op && a.query_id == b.query_id && a.port == b.port &&
         a.owner_pid == b.owner_pid;
}

std::vector<uint8_t> BytesOf(const Payload& p) {
  return std::vector<uint8_t>(p.data(), p.data() + p.size());
}

// `full` cut or zero-extended to `n` bytes.
Payload Resized(const Payload& full, size_t n) {
  Payload p(n);
  for (size_t i = 0; i < n; ++i) p.data()[i] = i < full.size() ? full.data()[i] : 0;
  return p;
}

// What the encoder produces and the decoders accept, learnt once.
struct Protocol {
  static constexpr size_t kSlack = 32;  // lengths probed past the default encoding
  size_t hello_size = 0;               // EncodeHello of a default Hello
  std::vector<uint8_t> hello_prefix;   // magic + version: its first 10 bytes
  std::vector<bool> hello_len_ok;      // [n]: a hello of n bytes is accepted
  std::set<uint16_t> kinds, results;
  size_t relay_offset = 0;             // the relay role: the default encoding's last byte
  std::set<uint8_t> relays;            // the relay role values accepted
  size_t control_size = 0;
  std::vector<bool> control_len_ok;
  std::set<uint8_t> ops;

  bool HelloLenOk(size_t n) const { return hello_len_ok[std::min(n, hello_len_ok.size() - 1)]; }
  bool ControlLenOk(size_t n) const {
    return control_len_ok[std::min(n, control_len_ok.size() - 1)];
  }

  Protocol() {
    MessagePtr m = control::EncodeHello(Hello());
    hello_size = m->payload.size();
    FUZZ_CHECK(hello_size >= 14, "hello payload of %zu bytes", hello_size);
    hello_prefix.assign(m->payload.data(), m->payload.data() + 10);
    for (size_t n = 0; n <= hello_size + kSlack; ++n) {
      hello_len_ok.push_back(control::DecodeHello(m->header, Resized(m->payload, n)).ok());
    }
    FUZZ_CHECK(hello_len_ok[hello_size], "a default hello is not accepted");
    relay_offset = hello_size - 1;
    for (uint32_t v = 0; v <= 0xff; ++v) {
      Payload with(m->payload.data(), m->payload.size());
      with.data()[relay_offset] = static_cast<uint8_t>(v);
      if (control::DecodeHello(m->header, with).ok()) relays.insert(static_cast<uint8_t>(v));
    }
    FUZZ_CHECK(relays.count(0) && relays.count(1) && relays.count(2) && relays.count(3),
               "relay roles 0..3 not accepted");
    for (uint32_t v = 0; v <= 0xffff; ++v) {
      Hello k;
      k.kind = static_cast<HelloKind>(v);
      MessagePtr mk = control::EncodeHello(k);
      if (control::DecodeHello(mk->header, mk->payload).ok()) kinds.insert(uint16_t(v));
      Hello r;
      r.result = static_cast<HelloResult>(v);
      MessagePtr mr = control::EncodeHello(r);
      if (control::DecodeHello(mr->header, mr->payload).ok()) results.insert(uint16_t(v));
    }
    FUZZ_CHECK(kinds.count(1) && kinds.count(2) && kinds.count(3) && kinds.count(4),
               "the hello kinds 1..4 are not all accepted");
    FUZZ_CHECK(results.count(0) && results.count(4), "hello results 0..4 not accepted");

    MessagePtr c = control::EncodeControl(Control());
    control_size = c->payload.size();
    for (size_t n = 0; n <= control_size + kSlack; ++n) {
      control_len_ok.push_back(control::DecodeControl(c->header, Resized(c->payload, n)).ok());
    }
    FUZZ_CHECK(control_len_ok[control_size], "a default control message is not accepted");
    for (uint32_t v = 0; v <= 0xff; ++v) {
      Control o;
      o.op = static_cast<Op>(v);
      MessagePtr mo = control::EncodeControl(o);
      if (control::DecodeControl(mo->header, mo->payload).ok()) ops.insert(uint8_t(v));
    }
    FUZZ_CHECK(ops.count(1) && ops.count(2) && ops.count(3), "control opcodes 1..3 not accepted");
  }
};

const Protocol& Proto() {
  static const Protocol* p = new Protocol();
  return *p;
}

// Sequential reader of the fuzz input for field values (zeros past the end).
class FieldReader {
 public:
  FieldReader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  uint64_t Get(size_t width) {
    uint64_t v = 0;
    for (size_t i = 0; i < width; ++i) v = (v << 8) | (off_ < n_ ? p_[off_++] : 0);
    return v;
  }
  RdsAddr Addr() {
    RdsAddr a;
    for (auto& b : a.bytes) b = static_cast<uint8_t>(Get(1));
    a.scope_id = static_cast<uint32_t>(Get(4));
    return a;
  }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t off_ = 0;
};

template <typename T>
T Pick(const std::set<T>& s, uint64_t v) {
  auto it = s.begin();
  std::advance(it, v % s.size());
  return *it;
}

// The first min(|a|, n) bytes of a and b agree.
bool AgreeOnCommonPrefix(const std::vector<uint8_t>& a, const uint8_t* b, size_t n) {
  size_t common = std::min(a.size(), n);
  return common == 0 || std::memcmp(a.data(), b, common) == 0;
}

void CheckDecoders(const wire::Header& header, const Payload& payload) {
  const Protocol& P = Proto();
  const uint8_t* p = payload.data();
  size_t n = payload.size();

  absl::StatusOr<Hello> hello = control::DecodeHello(header, payload);
  bool expect_hello = control::IsHello(header) && P.HelloLenOk(n) && n >= 14 &&
                      std::memcmp(p, P.hello_prefix.data(), 10) == 0 &&
                      P.kinds.count(uint16_t(RefBe(p + 10, 2))) &&
                      P.results.count(uint16_t(RefBe(p + 12, 2))) &&
                      (n <= P.relay_offset || P.relays.count(p[P.relay_offset]));
  FUZZ_CHECK(hello.ok() == expect_hello, "DecodeHello: %s, expected %s (payload %zu bytes)",
             hello.status().ToString().c_str(), expect_hello ? "ok" : "an error", n);
  FUZZ_CHECK(control::IsHello(header) ==
                 ((wire::IsHandshakePing(header) || wire::IsHandshakePong(header)) &&
                  wire::ParseExtHeaders(header).shim_hello),
             "IsHello");
  if (hello.ok()) {
    MessagePtr m = control::EncodeHello(*hello);
    std::vector<uint8_t> re = BytesOf(m->payload);
    FUZZ_CHECK(AgreeOnCommonPrefix(re, p, n),
               "a decoded hello re-encodes differently from its payload (%zu and %zu bytes)",
               re.size(), n);
    FUZZ_CHECK(control::IsHello(m->header) && m->header.len == m->payload.size(),
               "re-encoded hello header");
    absl::StatusOr<Hello> again = control::DecodeHello(m->header, m->payload);
    FUZZ_CHECK(again.ok() && SameHello(*again, *hello) &&
                   BytesOf(control::EncodeHello(*again)->payload) == re,
               "a re-encoded hello does not decode to the same hello");
  }

  absl::StatusOr<Control> ctl = control::DecodeControl(header, payload);
  std::optional<uint8_t> op = wire::ParseExtHeaders(header).shim_control;
  bool expect_ctl = wire::IsShimControl(header) && op && P.ops.count(*op) && P.ControlLenOk(n);
  FUZZ_CHECK(ctl.ok() == expect_ctl, "DecodeControl: %s, expected %s (payload %zu bytes)",
             ctl.status().ToString().c_str(), expect_ctl ? "ok" : "an error", n);
  if (ctl.ok()) {
    FUZZ_CHECK(static_cast<uint8_t>(ctl->op) == *op, "control opcode");
    MessagePtr m = control::EncodeControl(*ctl);
    std::vector<uint8_t> re = BytesOf(m->payload);
    FUZZ_CHECK(AgreeOnCommonPrefix(re, p, n),
               "a decoded control message re-encodes differently from its payload "
               "(%zu and %zu bytes)", re.size(), n);
    FUZZ_CHECK(wire::IsShimControl(m->header) &&
                   wire::ParseExtHeaders(m->header).shim_control == *op &&
                   m->header.len == m->payload.size(),
               "re-encoded control header");
    absl::StatusOr<Control> again = control::DecodeControl(m->header, m->payload);
    FUZZ_CHECK(again.ok() && SameControl(*again, *ctl) &&
                   BytesOf(control::EncodeControl(*again)->payload) == re,
               "a re-encoded control message does not decode to the same message");
  }
}

void CheckRoundTrips(const uint8_t* data, size_t size) {
  const Protocol& P = Proto();
  FieldReader b(data, size);
  Hello h;
  h.kind = static_cast<HelloKind>(Pick(P.kinds, b.Get(2)));
  h.result = static_cast<HelloResult>(Pick(P.results, b.Get(2)));
  h.pid = static_cast<uint32_t>(b.Get(4));
  h.gen = static_cast<uint32_t>(b.Get(4));
  h.uid = static_cast<uint32_t>(b.Get(4));
  h.ns.dev = b.Get(8);
  h.ns.ino = b.Get(8);
  h.from_addr = b.Addr();
  h.to_addr = b.Addr();
  h.target_pid = static_cast<uint32_t>(b.Get(4));
  h.query_port = static_cast<uint16_t>(b.Get(2));
  h.answer_pid = static_cast<uint32_t>(b.Get(4));
  MessagePtr m = control::EncodeHello(h);
  FUZZ_CHECK(m->header.len == m->payload.size(), "hello h_len");
  bool reply = h.kind == HelloKind::kReply;
  FUZZ_CHECK(reply ? wire::IsHandshakePong(m->header) : wire::IsHandshakePing(m->header),
             "hello kind %u is not shaped as a handshake %s", unsigned(h.kind),
             reply ? "pong" : "ping");
  wire::ExtHeaders e = wire::ParseExtHeaders(m->header);
  FUZZ_CHECK(e.shim_hello && e.npaths == wire::kNpathsAdvertised && e.gen_num == h.gen,
             "hello extension headers");
  absl::StatusOr<Hello> back = control::DecodeHello(m->header, m->payload);
  FUZZ_CHECK(back.ok(), "DecodeHello(EncodeHello(h)): %s", back.status().ToString().c_str());
  FUZZ_CHECK(SameHello(*back, h) &&
                 BytesOf(control::EncodeHello(*back)->payload) == BytesOf(m->payload),
             "DecodeHello(EncodeHello(h)) != h");

  Control c;
  c.op = static_cast<Op>(Pick(P.ops, b.Get(1)));
  c.query_id = static_cast<uint32_t>(b.Get(4));
  c.port = static_cast<uint16_t>(b.Get(2));
  c.owner_pid = static_cast<uint32_t>(b.Get(4));
  MessagePtr mc = control::EncodeControl(c);
  absl::StatusOr<Control> cback = control::DecodeControl(mc->header, mc->payload);
  FUZZ_CHECK(cback.ok(), "DecodeControl(EncodeControl(c)): %s", cback.status().ToString().c_str());
  FUZZ_CHECK(SameControl(*cback, c) &&
                 BytesOf(control::EncodeControl(*cback)->payload) == BytesOf(mc->payload),
             "DecodeControl(EncodeControl(c)) != c");
}

}  // namespace
}  // namespace rds::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using rds::wire::kHeaderSize;
  uint8_t hdr[kHeaderSize] = {};
  size_t n = size < kHeaderSize ? size : kHeaderSize;
  if (n) std::memcpy(hdr, data, n);
  rds::wire::Header header = rds::wire::Decode(hdr);
  rds::Payload payload(data + n, size - n);
  rds::fuzz::CheckDecoders(header, payload);
  rds::fuzz::CheckRoundTrips(data + n, size - n);
  return 0;
}
