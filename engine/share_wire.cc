// engine/share_wire.cc — encoding of forwarded calls, replies and parked state.
#include "engine/share_wire.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"
#include "engine/bytes.h"
#include "engine/sys.h"
#include "engine/wire.h"

namespace rds::share_wire {
namespace {

constexpr size_t kMaxBlobs = 8;

void PutBlobs(bytes::Writer& w, const std::vector<std::vector<uint8_t>>& blobs) {
  w.U8(static_cast<uint8_t>(blobs.size()));
  for (const auto& b : blobs) w.Blob(b.data(), b.size());
}

bool GetBlobs(bytes::Reader& r, std::vector<std::vector<uint8_t>>* blobs) {
  size_t n = r.U8();
  if (n > kMaxBlobs) return false;
  for (size_t i = 0; i < n && r.ok(); ++i) blobs->push_back(r.Blob());
  return r.ok();
}

void PutEndpoint(bytes::Writer& w, const std::optional<RdsEndpoint>& e) {
  w.U8(e.has_value());
  if (e) {
    w.Addr(e->addr);
    w.U16(e->port);
  }
}

std::optional<RdsEndpoint> GetEndpoint(bytes::Reader& r) {
  if (r.U8() == 0) return std::nullopt;
  RdsEndpoint e;
  e.addr = r.Addr();
  e.port = r.U16();
  return e;
}

// Every byte of `n`, retrying after signals; false on EOF or an error.
bool ReadAll(int fd, void* buf, size_t n) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    ssize_t r = sys::Read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool SendAll(int fd, const void* buf, size_t n) {
  auto* p = static_cast<const uint8_t*>(buf);
  while (n > 0) {
    ssize_t r = sys::Sendto(fd, p, n, MSG_NOSIGNAL, nullptr, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

}  // namespace

int64_t DurationToMicros(absl::Duration d) {
  return d == absl::InfiniteDuration() ? -1 : absl::ToInt64Microseconds(d);
}

absl::Duration MicrosToDuration(int64_t us) {
  return us < 0 ? absl::InfiniteDuration() : absl::Microseconds(us);
}

std::vector<uint8_t> EncodeRequest(const Request& r) {
  bytes::Writer w;
  w.U8(static_cast<uint8_t>(r.op));
  for (int32_t a : r.arg) w.U32(static_cast<uint32_t>(a));
  PutBlobs(w, r.blobs);
  return w.Take();
}

absl::StatusOr<Request> DecodeRequest(absl::Span<const uint8_t> body) {
  bytes::Reader r(body.data(), body.size());
  Request q;
  uint8_t op = r.U8();
  if (op < static_cast<uint8_t>(Op::kSend) || op > static_cast<uint8_t>(Op::kIoctl)) {
    return absl::InvalidArgumentError("unknown shared-socket call");
  }
  q.op = static_cast<Op>(op);
  for (int32_t& a : q.arg) a = static_cast<int32_t>(r.U32());
  if (!GetBlobs(r, &q.blobs) || r.remaining() != 0) {
    return absl::InvalidArgumentError("malformed shared-socket call");
  }
  return q;
}

std::vector<uint8_t> EncodeReply(const Reply& r) {
  bytes::Writer w;
  w.I64(r.result);
  for (int32_t o : r.out) w.U32(static_cast<uint32_t>(o));
  w.I64(r.timeout_us);
  PutBlobs(w, r.blobs);
  return w.Take();
}

absl::StatusOr<Reply> DecodeReply(absl::Span<const uint8_t> body) {
  bytes::Reader r(body.data(), body.size());
  Reply p;
  p.result = r.I64();
  for (int32_t& o : p.out) o = static_cast<int32_t>(r.U32());
  p.timeout_us = r.I64();
  if (!GetBlobs(r, &p.blobs) || r.remaining() != 0) {
    return absl::InvalidArgumentError("malformed shared-socket reply");
  }
  return p;
}

absl::Status WriteFrame(int fd, const std::vector<uint8_t>& body) {
  uint32_t len = htobe32(static_cast<uint32_t>(body.size()));
  if (!SendAll(fd, &len, sizeof(len)) || !SendAll(fd, body.data(), body.size())) {
    return absl::UnavailableError(absl::StrFormat("shared-socket write: %s", strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint8_t>> ReadFrame(int fd) {
  uint32_t len;
  if (!ReadAll(fd, &len, sizeof(len))) return absl::UnavailableError("shared-socket peer gone");
  len = be32toh(len);
  if (len > kMaxFrame) return absl::InvalidArgumentError("oversized shared-socket frame");
  std::vector<uint8_t> body(len);
  if (!ReadAll(fd, body.data(), len)) return absl::UnavailableError("shared-socket peer gone");
  return body;
}

std::vector<uint8_t> EncodeParked(const ParkedState& s) {
  bytes::Writer w;
  w.Bytes(kParkedMagic, sizeof(kParkedMagic));
  w.U64(s.id);
  PutEndpoint(w, s.bound);
  PutEndpoint(w, s.connected);
  w.U32(static_cast<uint32_t>(s.transport));
  w.U32(static_cast<uint32_t>(s.sk_sndbuf));
  w.U32(static_cast<uint32_t>(s.sk_rcvbuf));
  w.I64(s.sndtimeo_us);
  w.I64(s.rcvtimeo_us);
  w.U8(s.recverr);
  w.U8(s.cong_monitor);
  w.U64(s.cong_mask);
  w.U64(s.cong_notify);
  w.U8(s.timestamp);
  w.U8(s.rx_trace_count);
  w.Bytes(s.rx_trace_pos, sizeof(s.rx_trace_pos));
  w.U8(s.tos);
  w.U8(s.zerocopy);
  w.U8(s.inq);
  w.U8(s.has_sent);
  w.U32(static_cast<uint32_t>(s.zcookies.size()));
  for (uint32_t c : s.zcookies) w.U32(c);
  w.U32(static_cast<uint32_t>(s.queue.size()));
  for (const MessagePtr& m : s.queue) {
    uint8_t hdr[wire::kHeaderSize];
    wire::Encode(m->header, hdr);
    w.Bytes(hdr, sizeof(hdr));
    w.Addr(m->saddr);
    w.Addr(m->daddr);
    w.I64(absl::ToUnixNanos(m->received_at));
    for (int64_t t : m->rx_trace) w.I64(t);
    w.Blob(m->payload.data(), m->payload.size());
  }
  w.U32(static_cast<uint32_t>(s.nodes.size()));
  for (const HandedNodeConnection& c : s.nodes) {
    w.Addr(c.laddr);
    w.Addr(c.faddr);
    w.U32(static_cast<uint32_t>(c.paths.size()));
    for (const HandedNodeConnection::Path& p : c.paths) {
      w.U32(static_cast<uint32_t>(p.index));
      w.Blob(p.partial.data(), p.partial.size());
    }
  }
  return w.Take();
}

absl::StatusOr<ParkedState> DecodeParked(absl::Span<const uint8_t> body) {
  bytes::Reader r(body.data(), body.size());
  char magic[sizeof(kParkedMagic)];
  r.Bytes(magic, sizeof(magic));
  if (!r.ok() || std::memcmp(magic, kParkedMagic, sizeof(magic)) != 0) {
    return absl::InvalidArgumentError("not a parked socket");
  }
  ParkedState s;
  s.id = r.U64();
  s.bound = GetEndpoint(r);
  s.connected = GetEndpoint(r);
  s.transport = static_cast<int32_t>(r.U32());
  s.sk_sndbuf = static_cast<int32_t>(r.U32());
  s.sk_rcvbuf = static_cast<int32_t>(r.U32());
  s.sndtimeo_us = r.I64();
  s.rcvtimeo_us = r.I64();
  s.recverr = r.U8();
  s.cong_monitor = r.U8();
  s.cong_mask = r.U64();
  s.cong_notify = r.U64();
  s.timestamp = r.U8();
  s.rx_trace_count = r.U8();
  r.Bytes(s.rx_trace_pos, sizeof(s.rx_trace_pos));
  s.tos = r.U8();
  s.zerocopy = r.U8();
  s.inq = r.U8();
  s.has_sent = r.U8();
  uint32_t cookies = r.U32();
  if (cookies > 65536) return absl::InvalidArgumentError("parked socket: too many cookies");
  for (uint32_t i = 0; i < cookies && r.ok(); ++i) s.zcookies.push_back(r.U32());
  uint32_t queued = r.U32();
  for (uint32_t i = 0; i < queued && r.ok(); ++i) {
    MessagePtr m = NewMessage();
    uint8_t hdr[wire::kHeaderSize];
    r.Bytes(hdr, sizeof(hdr));
    m->header = wire::Decode(hdr);
    m->saddr = r.Addr();
    m->daddr = r.Addr();
    m->received_at = absl::FromUnixNanos(r.I64());
    for (int64_t& t : m->rx_trace) t = r.I64();
    std::vector<uint8_t> payload = r.Blob();
    if (payload.size() > wire::kMaxMessageSize + wire::kCongMapBytes) {
      return absl::InvalidArgumentError("parked socket: oversized message");
    }
    m->payload = Payload(payload.data(), payload.size());
    s.queue.push_back(std::move(m));
  }
  const uint32_t nodes = r.U32();
  if (nodes > kMaxHandedNodePaths) return absl::InvalidArgumentError("parked socket: too many nodes");
  size_t paths_total = 0;
  for (uint32_t i = 0; i < nodes && r.ok(); ++i) {
    HandedNodeConnection c;
    c.laddr = r.Addr();
    c.faddr = r.Addr();
    const uint32_t paths = r.U32();
    paths_total += paths;
    if (paths == 0 || paths_total > kMaxHandedNodePaths) {
      return absl::InvalidArgumentError("parked socket: a node's paths");
    }
    for (uint32_t j = 0; j < paths && r.ok(); ++j) {
      HandedNodeConnection::Path p;
      p.index = static_cast<int32_t>(r.U32());
      p.partial = r.Blob();
      if (p.index < 0 || p.index >= NodeRecord::kPaths ||
          p.partial.size() > wire::kHeaderSize + wire::kMaxMessageSize) {
        return absl::InvalidArgumentError("parked socket: a node path");
      }
      c.paths.push_back(std::move(p));
    }
    s.nodes.push_back(std::move(c));
  }
  if (!r.ok() || r.remaining() != 0) return absl::InvalidArgumentError("malformed parked socket");
  return s;
}

}  // namespace rds::share_wire
