// engine/control.cc — hello and control message bodies.
#include "engine/control.h"

#include <endian.h>

#include <cstring>

#include "engine/bytes.h"

namespace rds::control {
namespace {

constexpr char kMagic[8] = {'R', 'D', 'S', 'P', 'R', 'E', 'L', 'D'};
constexpr uint16_t kVersion = 1;

using bytes::Reader;
using bytes::Writer;

MessagePtr Finish(wire::Header header, const std::vector<uint8_t>& body) {
  auto m = NewMessage();
  header.len = static_cast<uint32_t>(body.size());
  m->header = header;
  m->payload = Payload(body.data(), body.size());
  return m;
}

}  // namespace

bool IsHello(const wire::Header& h) {
  return (wire::IsHandshakePing(h) || wire::IsHandshakePong(h)) &&
         wire::ParseExtHeaders(h).shim_hello;
}

MessagePtr EncodeHello(const Hello& h) {
  wire::Header header;
  bool reply = h.kind == HelloKind::kReply;
  header.sport = reply ? 0 : wire::kProbePort;
  header.dport = reply ? wire::kProbePort : 0;
  wire::ExtWriter ext(&header);
  ext.Npaths(wire::kNpathsAdvertised);
  ext.GenNum(h.gen);
  ext.ShimHello();
  Writer w;
  w.Bytes(kMagic, sizeof(kMagic));
  w.U16(kVersion);
  w.U16(static_cast<uint16_t>(h.kind));
  w.U16(static_cast<uint16_t>(h.result));
  w.U32(h.pid);
  w.U32(h.gen);
  w.U32(h.uid);
  w.U64(h.ns.dev);
  w.U64(h.ns.ino);
  w.Addr(h.from_addr);
  w.Addr(h.to_addr);
  w.U32(h.target_pid);
  w.U16(h.query_port);
  w.U32(h.answer_pid);
  w.U64(h.ack);
  w.U32(h.info_option);
  w.U64(h.socket_id);
  w.U8(static_cast<uint8_t>(h.relay));
  return Finish(header, w.bytes());
}

absl::StatusOr<Hello> DecodeHello(const wire::Header& header, const Payload& payload) {
  if (!IsHello(header)) return absl::InvalidArgumentError("not a shim hello");
  Reader r(payload.data(), payload.size());
  char magic[8];
  r.Bytes(magic, sizeof(magic));
  if (!r.ok() || std::memcmp(magic, kMagic, sizeof(kMagic)) != 0) {
    return absl::InvalidArgumentError("bad hello magic");
  }
  uint16_t version = r.U16();
  if (version != kVersion) return absl::InvalidArgumentError("unsupported hello version");
  Hello h;
  uint16_t kind = r.U16();
  uint16_t result = r.U16();
  if (kind < 1 || kind > 7 || result > 5) return absl::InvalidArgumentError("bad hello kind");
  h.kind = static_cast<HelloKind>(kind);
  h.result = static_cast<HelloResult>(result);
  h.pid = r.U32();
  h.gen = r.U32();
  h.uid = r.U32();
  h.ns.dev = r.U64();
  h.ns.ino = r.U64();
  h.from_addr = r.Addr();
  h.to_addr = r.Addr();
  h.target_pid = r.U32();
  h.query_port = r.U16();
  h.answer_pid = r.U32();
  if (!r.ok()) return absl::InvalidArgumentError("truncated hello");
  // Trailing fields added later are optional: an older or simpler peer's
  // hello simply ends before them.
  if (r.remaining() > 0) {
    h.ack = r.U64();
    if (!r.ok()) return absl::InvalidArgumentError("truncated hello");
  }
  if (r.remaining() > 0) {
    h.info_option = r.U32();
    if (!r.ok()) return absl::InvalidArgumentError("truncated hello");
  }
  if (r.remaining() > 0) {
    h.socket_id = r.U64();
    if (!r.ok()) return absl::InvalidArgumentError("truncated hello");
  }
  if (r.remaining() > 0) {
    const uint8_t relay = r.U8();
    if (!r.ok() || relay > 3) return absl::InvalidArgumentError("bad hello relay role");
    h.relay = static_cast<Relay>(relay);
  }
  return h;
}

MessagePtr EncodeControl(const Control& c) {
  wire::Header header;
  header.sport = wire::kProbePort;
  header.dport = wire::kProbePort;
  wire::ExtWriter ext(&header);
  ext.ShimControl(static_cast<uint8_t>(c.op));
  Writer w;
  w.U32(c.query_id);
  w.U16(c.port);
  w.U32(c.owner_pid);
  w.Bytes(c.data.data(), c.data.size());
  return Finish(header, w.bytes());
}

absl::StatusOr<Control> DecodeControl(const wire::Header& header, const Payload& payload) {
  std::optional<uint8_t> op = wire::ParseExtHeaders(header).shim_control;
  if (!wire::IsShimControl(header) || !op || *op < 1 ||
      *op > static_cast<uint8_t>(Op::kMoved)) {
    return absl::InvalidArgumentError("not a shim control message");
  }
  Reader r(payload.data(), payload.size());
  Control c;
  c.op = static_cast<Op>(*op);
  c.query_id = r.U32();
  c.port = r.U16();
  c.owner_pid = r.U32();
  if (!r.ok()) return absl::InvalidArgumentError("truncated control message");
  c.data.resize(r.remaining());
  r.Bytes(c.data.data(), c.data.size());
  return c;
}

MessagePtr EncodeU64List(Op op, absl::Span<const uint64_t> values) {
  Control c;
  c.op = op;
  Writer w;
  for (uint64_t v : values) w.U64(v);
  c.data = w.bytes();
  return EncodeControl(c);
}

absl::StatusOr<std::vector<uint64_t>> DecodeU64List(const Control& c) {
  if (c.data.size() % 8 != 0 || c.data.size() / 8 > kMaxU64ListValues) {
    return absl::InvalidArgumentError("malformed list of 64-bit values");
  }
  Reader r(c.data.data(), c.data.size());
  std::vector<uint64_t> out(c.data.size() / 8);
  for (uint64_t& v : out) v = r.U64();
  return out;
}

std::vector<MessagePtr> EncodeInfoAnswer(uint32_t each, std::vector<uint8_t> bytes) {
  std::vector<MessagePtr> out;
  size_t off = 0;
  while (bytes.size() - off > kInfoPartBytes) {
    Control part;
    part.op = Op::kInfoDataPart;
    part.query_id = each;
    part.data.assign(bytes.begin() + static_cast<ptrdiff_t>(off),
                     bytes.begin() + static_cast<ptrdiff_t>(off + kInfoPartBytes));
    out.push_back(EncodeControl(part));
    off += kInfoPartBytes;
  }
  Control last;
  last.op = Op::kInfoData;
  last.query_id = each;
  if (off == 0) {
    last.data = std::move(bytes);
  } else {
    last.data.assign(bytes.begin() + static_cast<ptrdiff_t>(off), bytes.end());
  }
  out.push_back(EncodeControl(last));
  return out;
}

absl::Status InfoAnswerReader::Add(Control&& c) {
  if (complete_) return absl::InvalidArgumentError("a message after the end of the answer");
  if (c.op != Op::kInfoData && c.op != Op::kInfoDataPart) {
    return absl::InvalidArgumentError("not a part of an info answer");
  }
  each_ = c.query_id;
  if (bytes_.empty()) {
    bytes_ = std::move(c.data);
  } else {
    bytes_.insert(bytes_.end(), c.data.begin(), c.data.end());
  }
  complete_ = c.op == Op::kInfoData;
  return absl::OkStatus();
}

}  // namespace rds::control
