// Unit tests for engine/share_wire: the records of socket sharing (forwarded
// calls, their replies, parked sockets), their frames on a stream, and the
// bounds-checked byte reader/writer (engine/bytes.h) they are built on.
#include "engine/share_wire.h"

#include <arpa/inet.h>
#include <endian.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/bytes.h"
#include "engine/message.h"
#include "engine/wire.h"

namespace rds::share_wire {
namespace {

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 8));
  return v;
}

// An exact-size heap copy of the first `n` bytes, so that a decoder reading
// past the end of its input is caught by ASan in a sanitizer build.
std::unique_ptr<uint8_t[]> Prefix(const std::vector<uint8_t>& v, size_t n) {
  auto p = std::make_unique<uint8_t[]>(n ? n : 1);
  if (n) std::memcpy(p.get(), v.data(), n);
  return p;
}

void PutBe32At(std::vector<uint8_t>& v, size_t off, uint32_t x) {
  uint32_t be = htobe32(x);
  std::memcpy(v.data() + off, &be, sizeof(be));
}

RdsAddr V4(const char* s) {
  in_addr a{};
  EXPECT_EQ(inet_pton(AF_INET, s, &a), 1) << s;
  return RdsAddr::FromV4(a);
}

RdsAddr V6(const char* s, uint32_t scope) {
  in6_addr a{};
  EXPECT_EQ(inet_pton(AF_INET6, s, &a), 1) << s;
  return RdsAddr::FromV6(a, scope);
}

// ---------------------------------------------------------------------------
// engine/bytes.h

TEST(ShareWireBytesTest, WriterIsBigEndianAndReaderRoundTrips) {
  bytes::Writer w;
  w.U8(0xab);
  w.U16(0x0102);
  w.U32(0x03040506);
  w.U64(0x0708090a0b0c0d0eULL);
  w.I64(-2);
  const uint8_t raw[3] = {9, 8, 7};
  w.Blob(raw, sizeof(raw));
  w.Blob(nullptr, 0);
  RdsAddr a = V6("fe80::1234", 42);
  w.Addr(a);
  std::vector<uint8_t> b = w.Take();
  ASSERT_EQ(b.size(), 1u + 2 + 4 + 8 + 8 + (4 + 3) + 4 + 20);
  EXPECT_EQ(b[0], 0xab);
  EXPECT_EQ(b[1], 0x01);
  EXPECT_EQ(b[2], 0x02);
  EXPECT_EQ(b[3], 0x03);
  EXPECT_EQ(b[6], 0x06);
  EXPECT_EQ(b[7], 0x07);
  EXPECT_EQ(b[14], 0x0e);

  bytes::Reader r(b.data(), b.size());
  EXPECT_EQ(r.U8(), 0xab);
  EXPECT_EQ(r.U16(), 0x0102);
  EXPECT_EQ(r.U32(), 0x03040506u);
  EXPECT_EQ(r.U64(), 0x0708090a0b0c0d0eULL);
  EXPECT_EQ(r.I64(), -2);
  EXPECT_EQ(r.Blob(), std::vector<uint8_t>({9, 8, 7}));
  EXPECT_TRUE(r.Blob().empty());
  EXPECT_EQ(r.Addr(), a);
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.remaining(), 0u);
}

TEST(ShareWireBytesTest, ShortReaderFailsAndReturnsZeros) {
  const uint8_t three[3] = {1, 2, 3};
  bytes::Reader r(three, sizeof(three));
  EXPECT_EQ(r.U32(), 0u);  // needs 4
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.U8(), 0u);  // sticky: even a byte that is there is not read
  EXPECT_EQ(r.remaining(), 3u);

  // A blob whose length runs past the end.
  bytes::Writer w;
  w.U32(5);
  w.U8(1);
  std::vector<uint8_t> b = w.Take();
  bytes::Reader rb(b.data(), b.size());
  EXPECT_TRUE(rb.Blob().empty());
  EXPECT_FALSE(rb.ok());
}

// ---------------------------------------------------------------------------
// Request

Request FullRequest() {
  Request q;
  q.op = Op::kSetOpt;
  q.arg[0] = -1;
  q.arg[1] = INT32_MIN;
  q.arg[2] = INT32_MAX;
  q.arg[3] = 0x12345678;
  q.blobs.push_back({});
  q.blobs.push_back({0x00});
  q.blobs.push_back(Pattern(300, 3));
  q.blobs.push_back({});
  q.blobs.push_back({0xff, 0xfe});
  return q;
}

void ExpectSameRequest(const Request& a, const Request& b) {
  EXPECT_EQ(a.op, b.op);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(a.arg[i], b.arg[i]) << "arg " << i;
  EXPECT_EQ(a.blobs, b.blobs);
}

TEST(ShareWireRequestTest, RoundTripsEveryField) {
  Request q = FullRequest();
  std::vector<uint8_t> enc = EncodeRequest(q);
  absl::StatusOr<Request> back = DecodeRequest(enc);
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameRequest(*back, q);
  ASSERT_EQ(back->blobs.size(), 5u);
  EXPECT_TRUE(back->blobs[0].empty());
  EXPECT_TRUE(back->blobs[3].empty());
  EXPECT_EQ(back->blobs[2].size(), 300u);
}

TEST(ShareWireRequestTest, RoundTripsEveryOpWithoutBlobs) {
  for (uint8_t op = 1; op <= 9; ++op) {
    Request q;
    q.op = static_cast<Op>(op);
    q.arg[0] = op;
    q.arg[3] = -op;
    absl::StatusOr<Request> back = DecodeRequest(EncodeRequest(q));
    ASSERT_TRUE(back.ok()) << "op " << int(op) << ": " << back.status();
    ExpectSameRequest(*back, q);
    EXPECT_TRUE(back->blobs.empty());
  }
}

TEST(ShareWireRequestTest, AcceptsExactlyEightBlobs) {
  Request q;
  q.op = Op::kSend;
  for (int i = 0; i < 8; ++i) q.blobs.push_back(Pattern(i, static_cast<uint8_t>(i)));
  absl::StatusOr<Request> back = DecodeRequest(EncodeRequest(q));
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameRequest(*back, q);
}

TEST(ShareWireRequestTest, RejectsUnknownOp) {
  for (uint8_t op : {uint8_t{0}, uint8_t{10}, uint8_t{0xff}}) {
    std::vector<uint8_t> enc = EncodeRequest(FullRequest());
    enc[0] = op;
    absl::StatusOr<Request> back = DecodeRequest(enc);
    EXPECT_FALSE(back.ok()) << "op " << int(op);
    EXPECT_EQ(back.status().code(), absl::StatusCode::kInvalidArgument);
  }
  Request q;
  q.op = static_cast<Op>(10);
  EXPECT_FALSE(DecodeRequest(EncodeRequest(q)).ok());
  q.op = static_cast<Op>(0);
  EXPECT_FALSE(DecodeRequest(EncodeRequest(q)).ok());
}

TEST(ShareWireRequestTest, RejectsEveryTruncation) {
  std::vector<uint8_t> enc = EncodeRequest(FullRequest());
  ASSERT_TRUE(DecodeRequest(enc).ok());
  for (size_t n = 0; n < enc.size(); ++n) {
    auto p = Prefix(enc, n);
    EXPECT_FALSE(DecodeRequest(absl::Span<const uint8_t>(p.get(), n)).ok()) << "prefix " << n;
  }
  // An empty body (no op byte at all).
  EXPECT_FALSE(DecodeRequest(absl::Span<const uint8_t>()).ok());
}

TEST(ShareWireRequestTest, RejectsTrailingGarbage) {
  for (const Request& q : {FullRequest(), Request{}}) {
    std::vector<uint8_t> enc = EncodeRequest(q);
    ASSERT_TRUE(DecodeRequest(enc).ok());
    enc.push_back(0);
    EXPECT_FALSE(DecodeRequest(enc).ok());
    enc.insert(enc.end(), {1, 2, 3, 4, 5, 6, 7, 8});
    EXPECT_FALSE(DecodeRequest(enc).ok());
  }
}

TEST(ShareWireRequestTest, RejectsMoreThanEightBlobs) {
  Request q;
  q.op = Op::kSend;
  for (int i = 0; i < 9; ++i) q.blobs.push_back({static_cast<uint8_t>(i)});
  EXPECT_FALSE(DecodeRequest(EncodeRequest(q)).ok());
  // A count of 255 with no blobs after it.
  Request e;
  std::vector<uint8_t> enc = EncodeRequest(e);
  ASSERT_EQ(enc.size(), 1u + 16 + 1);
  enc[17] = 0xff;
  EXPECT_FALSE(DecodeRequest(enc).ok());
}

TEST(ShareWireRequestTest, RejectsBlobRunningPastTheEnd) {
  Request q;
  q.op = Op::kIoctl;
  q.blobs.push_back({1, 2, 3});
  std::vector<uint8_t> enc = EncodeRequest(q);
  // op(1) args(16) count(1) then the blob's be32 length at 18.
  ASSERT_EQ(enc.size(), 1u + 16 + 1 + 4 + 3);
  ASSERT_EQ(enc[21], 3);
  ASSERT_TRUE(DecodeRequest(enc).ok());
  for (uint32_t len : {4u, 100u, 0x7fffffffu, 0xffffffffu}) {
    PutBe32At(enc, 18, len);
    EXPECT_FALSE(DecodeRequest(enc).ok()) << "length " << len;
  }
  // A shorter length leaves bytes over: also rejected.
  PutBe32At(enc, 18, 2);
  EXPECT_FALSE(DecodeRequest(enc).ok());
}

// ---------------------------------------------------------------------------
// Reply

Reply FullReply() {
  Reply p;
  p.result = -EAGAIN;
  p.out[0] = 0x40;  // MSG_TRUNC-ish
  p.out[1] = -28;
  p.out[2] = INT32_MAX;
  p.timeout_us = -1;
  p.blobs.push_back(Pattern(1000, 9));
  p.blobs.push_back({});
  p.blobs.push_back({1, 2, 3, 4});
  return p;
}

void ExpectSameReply(const Reply& a, const Reply& b) {
  EXPECT_EQ(a.result, b.result);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(a.out[i], b.out[i]) << "out " << i;
  EXPECT_EQ(a.timeout_us, b.timeout_us);
  EXPECT_EQ(a.blobs, b.blobs);
}

TEST(ShareWireReplyTest, RoundTripsNegativeResultAndNoTimeout) {
  Reply p = FullReply();
  absl::StatusOr<Reply> back = DecodeReply(EncodeReply(p));
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameReply(*back, p);
  EXPECT_EQ(back->timeout_us, -1);
  EXPECT_EQ(back->result, -EAGAIN);
}

TEST(ShareWireReplyTest, RoundTripsPositiveResultAndTimeout) {
  Reply p;
  p.result = (int64_t{1} << 40) + 5;
  p.out[0] = 1;
  p.out[1] = 28;
  p.out[2] = -1;
  p.timeout_us = 2'500'000;
  p.blobs.push_back({});
  p.blobs.push_back({});
  absl::StatusOr<Reply> back = DecodeReply(EncodeReply(p));
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameReply(*back, p);
  ASSERT_EQ(back->blobs.size(), 2u);

  for (int64_t v : {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(),
                    int64_t{0}}) {
    Reply e;
    e.result = v;
    e.timeout_us = v;
    absl::StatusOr<Reply> b2 = DecodeReply(EncodeReply(e));
    ASSERT_TRUE(b2.ok()) << b2.status();
    ExpectSameReply(*b2, e);
  }
}

TEST(ShareWireReplyTest, RejectsEveryTruncation) {
  std::vector<uint8_t> enc = EncodeReply(FullReply());
  ASSERT_TRUE(DecodeReply(enc).ok());
  for (size_t n = 0; n < enc.size(); ++n) {
    auto p = Prefix(enc, n);
    EXPECT_FALSE(DecodeReply(absl::Span<const uint8_t>(p.get(), n)).ok()) << "prefix " << n;
  }
  // A reply without blobs too (the count is the last byte).
  std::vector<uint8_t> bare = EncodeReply(Reply{});
  ASSERT_EQ(bare.size(), 8u + 12 + 8 + 1);
  for (size_t n = 0; n < bare.size(); ++n) {
    auto p = Prefix(bare, n);
    EXPECT_FALSE(DecodeReply(absl::Span<const uint8_t>(p.get(), n)).ok()) << "prefix " << n;
  }
}

TEST(ShareWireReplyTest, RejectsTrailingBytesAndTooManyBlobs) {
  std::vector<uint8_t> enc = EncodeReply(FullReply());
  enc.push_back(0);
  EXPECT_FALSE(DecodeReply(enc).ok());

  Reply p;
  for (int i = 0; i < 9; ++i) p.blobs.push_back({});
  EXPECT_FALSE(DecodeReply(EncodeReply(p)).ok());
  p.blobs.pop_back();
  EXPECT_TRUE(DecodeReply(EncodeReply(p)).ok());
}

// ---------------------------------------------------------------------------
// ParkedState

MessagePtr MakeMessage(const wire::Header& h, const RdsAddr& s, const RdsAddr& d, absl::Time at,
                       const int64_t (&trace)[4], const std::vector<uint8_t>& payload) {
  MessagePtr m = NewMessage();
  m->header = h;
  m->saddr = s;
  m->daddr = d;
  m->received_at = at;
  for (int i = 0; i < 4; ++i) m->rx_trace[i] = trace[i];
  m->payload = Payload(payload.data(), payload.size());
  return m;
}

struct Expected {
  wire::Header header;
  RdsAddr saddr, daddr;
  absl::Time at;
  int64_t trace[4];
  std::vector<uint8_t> payload;
};

// A parked socket with every field set away from its default, and three
// queued messages whose payloads are `sizes`.
ParkedState FullParked(const std::vector<size_t>& sizes, std::vector<Expected>* expected) {
  ParkedState s;
  s.id = 0x0102030405060708ULL;
  s.bound = RdsEndpoint{V4("10.1.2.3"), 18634};
  s.connected = RdsEndpoint{V6("fe80::1:2:3:4", 7), 0xfffe};
  s.transport = 2;
  s.sk_sndbuf = 262144;
  s.sk_rcvbuf = -3;
  s.sndtimeo_us = 1500;
  s.rcvtimeo_us = -1;
  s.recverr = true;
  s.cong_monitor = true;
  s.cong_mask = 0x8000000000000001ULL;
  s.cong_notify = 0x00ff00ff00ff00ffULL;
  s.timestamp = 3;
  s.rx_trace_count = 2;
  s.rx_trace_pos[0] = 1;
  s.rx_trace_pos[1] = 3;
  s.rx_trace_pos[2] = 0xee;
  s.tos = 0xa5;
  s.zerocopy = true;
  s.inq = true;
  s.has_sent = true;
  s.zcookies = {0, 1, 0xffffffffu, 0xdeadbeefu};

  const RdsAddr addrs[] = {V4("192.168.7.9"), V6("2001:db8::42", 0), V6("fe80::99", 12)};
  for (size_t i = 0; i < sizes.size(); ++i) {
    Expected e;
    e.header.sequence = 0x1000000000000000ULL + i;
    e.header.ack = 77 + i;
    e.header.len = static_cast<uint32_t>(sizes[i]);
    e.header.sport = static_cast<uint16_t>(4000 + i);
    e.header.dport = static_cast<uint16_t>(0xff00 + i);
    e.header.flags = static_cast<uint8_t>(1u << i);
    e.header.credit = static_cast<uint8_t>(i + 1);
    e.header.csum = static_cast<uint16_t>(0xabc0 + i);
    for (size_t k = 0; k < wire::kExtHeaderSpace; ++k) {
      e.header.exthdr[k] = static_cast<uint8_t>(i * 16 + k + 1);
    }
    e.saddr = addrs[i % 3];
    e.daddr = addrs[(i + 1) % 3];
    e.at = absl::FromUnixNanos(1'700'000'000'123'456'789LL + static_cast<int64_t>(i) * 1001);
    for (int k = 0; k < 4; ++k) e.trace[k] = static_cast<int64_t>(i) * 1'000'000'007LL + k - 2;
    e.payload = Pattern(sizes[i], static_cast<uint8_t>(0x30 + i));
    s.queue.push_back(MakeMessage(e.header, e.saddr, e.daddr, e.at, e.trace, e.payload));
    if (expected) expected->push_back(std::move(e));
  }
  return s;
}

void ExpectSameScalars(const ParkedState& a, const ParkedState& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.bound, b.bound);
  EXPECT_EQ(a.connected, b.connected);
  EXPECT_EQ(a.transport, b.transport);
  EXPECT_EQ(a.sk_sndbuf, b.sk_sndbuf);
  EXPECT_EQ(a.sk_rcvbuf, b.sk_rcvbuf);
  EXPECT_EQ(a.sndtimeo_us, b.sndtimeo_us);
  EXPECT_EQ(a.rcvtimeo_us, b.rcvtimeo_us);
  EXPECT_EQ(a.recverr, b.recverr);
  EXPECT_EQ(a.cong_monitor, b.cong_monitor);
  EXPECT_EQ(a.cong_mask, b.cong_mask);
  EXPECT_EQ(a.cong_notify, b.cong_notify);
  EXPECT_EQ(a.timestamp, b.timestamp);
  EXPECT_EQ(a.rx_trace_count, b.rx_trace_count);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(a.rx_trace_pos[i], b.rx_trace_pos[i]) << "pos " << i;
  EXPECT_EQ(a.tos, b.tos);
  EXPECT_EQ(a.zerocopy, b.zerocopy);
  EXPECT_EQ(a.inq, b.inq);
  EXPECT_EQ(a.has_sent, b.has_sent);
  EXPECT_EQ(a.zcookies, b.zcookies);
  EXPECT_EQ(a.queue.size(), b.queue.size());
}

TEST(ShareWireParkedTest, RoundTripsEveryFieldAndTheQueue) {
  std::vector<Expected> want;
  ParkedState s = FullParked({0, 1, 70000}, &want);
  ASSERT_EQ(s.bound->addr.scope_id, 0u);
  ASSERT_TRUE(s.bound->addr.IsV4Mapped());
  ASSERT_EQ(s.connected->addr.scope_id, 7u);  // link-local: the scope is kept

  std::vector<uint8_t> enc = EncodeParked(s);
  ASSERT_EQ(std::memcmp(enc.data(), kParkedMagic, sizeof(kParkedMagic)), 0);
  absl::StatusOr<ParkedState> back = DecodeParked(enc);
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameScalars(*back, s);
  ASSERT_TRUE(back->bound.has_value());
  ASSERT_TRUE(back->connected.has_value());
  EXPECT_EQ(back->bound->port, 18634);
  EXPECT_EQ(back->connected->addr.scope_id, 7u);
  EXPECT_EQ(back->connected->port, 0xfffe);

  ASSERT_EQ(back->queue.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    const Message& m = *back->queue[i];
    const Expected& e = want[i];
    EXPECT_EQ(m.header, e.header);
    EXPECT_EQ(m.header.sport, e.header.sport);
    EXPECT_EQ(m.header.dport, e.header.dport);
    EXPECT_EQ(m.header.len, e.header.len);
    EXPECT_EQ(m.header.flags, e.header.flags);
    EXPECT_EQ(m.header.sequence, e.header.sequence);
    EXPECT_EQ(m.header.exthdr, e.header.exthdr);
    EXPECT_EQ(m.saddr, e.saddr);
    EXPECT_EQ(m.daddr, e.daddr);
    EXPECT_EQ(m.received_at, e.at);
    for (int k = 0; k < 4; ++k) EXPECT_EQ(m.rx_trace[k], e.trace[k]) << "trace " << k;
    ASSERT_EQ(m.payload.size(), e.payload.size());
    if (!e.payload.empty()) {
      EXPECT_EQ(std::memcmp(m.payload.data(), e.payload.data(), e.payload.size()), 0);
    }
  }
  EXPECT_EQ(back->queue[2]->payload.size(), 70000u);
  EXPECT_EQ(back->queue[2]->daddr.scope_id, 0u);        // 192.168.7.9 (mapped)
  EXPECT_EQ(back->queue[1]->daddr.scope_id, 12u);       // fe80::99%12
  EXPECT_TRUE(back->queue[0]->saddr.IsV4Mapped());
}

// Kernel nodes' connections that ride with a parked socket: which
// connection, and per path its index and the bytes of a message read in part
// (the sockets themselves travel beside the encoding: never encoded).
TEST(ShareWireParkedTest, RoundTripsKernelNodeConnections) {
  ParkedState s = FullParked({5}, nullptr);
  HandedNodeConnection a;
  a.laddr = V4("10.77.0.2");
  a.faddr = V4("10.77.0.1");
  a.paths.push_back({0, 41, Pattern(48 + 300, 9)});
  HandedNodeConnection b;
  b.laddr = V4("10.77.0.2");
  b.faddr = V6("2001:db8::7", 0);
  b.paths.push_back({3, 42, {}});
  b.paths.push_back({7, 43, Pattern(17, 1)});
  s.nodes = {a, b};
  EXPECT_EQ(s.NodeFds(), 3u);
  absl::StatusOr<ParkedState> back = DecodeParked(EncodeParked(s));
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->queue.size(), 1u);
  ASSERT_EQ(back->nodes.size(), 2u);
  EXPECT_EQ(back->NodeFds(), 3u);
  for (size_t i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    const HandedNodeConnection& want = s.nodes[i];
    const HandedNodeConnection& got = back->nodes[i];
    EXPECT_EQ(got.laddr, want.laddr);
    EXPECT_EQ(got.faddr, want.faddr);
    ASSERT_EQ(got.paths.size(), want.paths.size());
    for (size_t j = 0; j < want.paths.size(); ++j) {
      EXPECT_EQ(got.paths[j].index, want.paths[j].index);
      EXPECT_EQ(got.paths[j].partial, want.paths[j].partial);
      EXPECT_EQ(got.paths[j].fd, -1) << "a descriptor number is not state";
    }
  }
}

TEST(ShareWireParkedTest, RejectsImpossibleNodePaths) {
  auto with = [](std::vector<HandedNodeConnection> nodes) {
    ParkedState s;
    s.nodes = std::move(nodes);
    return DecodeParked(EncodeParked(s));
  };
  HandedNodeConnection one;
  one.laddr = V4("10.0.0.1");
  one.faddr = V4("10.0.0.2");
  one.paths.push_back({7, -1, {}});
  ASSERT_TRUE(with({one}).ok());
  HandedNodeConnection bad_index = one;
  bad_index.paths[0].index = 8;  // a node has 8 paths: 0..7
  EXPECT_FALSE(with({bad_index}).ok());
  HandedNodeConnection none = one;
  none.paths.clear();
  EXPECT_FALSE(with({none}).ok());
  HandedNodeConnection oversized = one;
  oversized.paths[0].partial.resize(wire::kHeaderSize + wire::kMaxMessageSize + 1);
  EXPECT_FALSE(with({oversized}).ok());
  // At most kMaxHandedNodePaths paths in all (the descriptors of one datagram).
  std::vector<HandedNodeConnection> many(kMaxHandedNodePaths, one);
  EXPECT_TRUE(with(many).ok());
  many.push_back(one);
  EXPECT_FALSE(with(many).ok());
}

TEST(ShareWireParkedTest, RoundTripsAbsentEndpointsAndDefaults) {
  ParkedState d;
  std::vector<uint8_t> enc = EncodeParked(d);
  absl::StatusOr<ParkedState> back = DecodeParked(enc);
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameScalars(*back, d);
  EXPECT_FALSE(back->bound.has_value());
  EXPECT_FALSE(back->connected.has_value());
  EXPECT_EQ(back->sndtimeo_us, -1);
  EXPECT_TRUE(back->queue.empty());

  // Only one of the two present, each way round (a swap would show).
  ParkedState s = FullParked({}, nullptr);
  s.connected.reset();
  back = DecodeParked(EncodeParked(s));
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameScalars(*back, s);
  EXPECT_TRUE(back->bound.has_value());
  EXPECT_FALSE(back->connected.has_value());

  s = FullParked({}, nullptr);
  s.bound.reset();
  back = DecodeParked(EncodeParked(s));
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameScalars(*back, s);
  EXPECT_FALSE(back->bound.has_value());
  ASSERT_TRUE(back->connected.has_value());
  EXPECT_EQ(back->connected->addr, V6("fe80::1:2:3:4", 7));
}

TEST(ShareWireParkedTest, RejectsWrongMagic) {
  std::vector<uint8_t> good = EncodeParked(FullParked({1}, nullptr));
  ASSERT_TRUE(DecodeParked(good).ok());
  for (size_t i = 0; i < sizeof(kParkedMagic); ++i) {
    std::vector<uint8_t> bad = good;
    bad[i] ^= 0x01;
    EXPECT_FALSE(DecodeParked(bad).ok()) << "magic byte " << i;
  }
  std::vector<uint8_t> v2 = good;
  v2[7] = '2';  // "RDSPARK2"
  EXPECT_FALSE(DecodeParked(v2).ok());
}

TEST(ShareWireParkedTest, RejectsEveryTruncation) {
  // The 70000-byte payload is last, so no strict prefix holds it whole.
  std::vector<uint8_t> enc = EncodeParked(FullParked({0, 1, 70000}, nullptr));
  ASSERT_TRUE(DecodeParked(enc).ok());
  // Every prefix up to just inside the large payload and its last bytes; a stride across the
  // rest (each prefix is a copy: all 70 000 of them take minutes under TSan).
  const size_t payload_start = enc.size() - 70000;
  for (size_t n = 0; n < enc.size(); n += (n < payload_start + 64 || n + 64 >= enc.size()) ? 1 : 509) {
    auto p = Prefix(enc, n);
    absl::StatusOr<ParkedState> r = DecodeParked(absl::Span<const uint8_t>(p.get(), n));
    EXPECT_FALSE(r.ok()) << "prefix " << n << " of " << enc.size();
    if (r.ok()) break;  // one report is enough
  }
  // Endpoints absent, no cookies, empty queue: a different layout.
  std::vector<uint8_t> bare = EncodeParked(ParkedState{});
  ASSERT_TRUE(DecodeParked(bare).ok());
  for (size_t n = 0; n < bare.size(); ++n) {
    auto p = Prefix(bare, n);
    EXPECT_FALSE(DecodeParked(absl::Span<const uint8_t>(p.get(), n)).ok()) << "prefix " << n;
  }
}

TEST(ShareWireParkedTest, RejectsTrailingBytes) {
  for (std::vector<uint8_t> enc :
       {EncodeParked(FullParked({0, 1, 5}, nullptr)), EncodeParked(ParkedState{})}) {
    enc.push_back(0);
    EXPECT_FALSE(DecodeParked(enc).ok());
  }
}

// The layout of a default ParkedState: magic 8, id 8, two absent endpoints
// 1+1, three i32 12, two i64 16, two flags 2, two u64 16, timestamp and
// rx_trace_count 2, rx_trace_pos 3, four flags 4 = 73; then the cookie count
// (be32), the queue count (be32) and the kernel node connections' count (be32).
constexpr size_t kCookieCountOffset = 73;

TEST(ShareWireParkedTest, RejectsMoreThan65536Cookies) {
  // 65536 cookies is the limit and decodes.
  ParkedState s;
  for (uint32_t i = 0; i < 65536; ++i) s.zcookies.push_back(i * 3);
  std::vector<uint8_t> enc = EncodeParked(s);
  absl::StatusOr<ParkedState> back = DecodeParked(enc);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->zcookies, s.zcookies);

  // 65537 of them, every byte present: rejected for the count alone.
  s.zcookies.push_back(7);
  enc = EncodeParked(s);
  ASSERT_EQ(enc.size(), kCookieCountOffset + 4 + 65537 * 4 + 4 + 4);
  EXPECT_FALSE(DecodeParked(enc).ok());

  // A huge count with nothing behind it.
  std::vector<uint8_t> bare = EncodeParked(ParkedState{});
  ASSERT_EQ(bare.size(), kCookieCountOffset + 12);
  PutBe32At(bare, kCookieCountOffset, 0xffffffffu);
  EXPECT_FALSE(DecodeParked(bare).ok());
}

TEST(ShareWireParkedTest, RejectsHugeQueueCountAndOversizedMessage) {
  std::vector<uint8_t> bare = EncodeParked(ParkedState{});
  PutBe32At(bare, kCookieCountOffset + 4, 0xffffffffu);
  EXPECT_FALSE(DecodeParked(bare).ok());  // must stop at the end, not loop 4G times

  // A payload larger than a message plus a congestion map.
  ParkedState s = FullParked({wire::kMaxMessageSize + wire::kCongMapBytes + 1}, nullptr);
  EXPECT_FALSE(DecodeParked(EncodeParked(s)).ok());
  s = FullParked({wire::kMaxMessageSize + wire::kCongMapBytes}, nullptr);
  EXPECT_TRUE(DecodeParked(EncodeParked(s)).ok());
}

// ---------------------------------------------------------------------------
// Frames

class ShareWireFrameTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds_), 0) << errno; }
  void TearDown() override {
    for (int& fd : fds_) {
      if (fd >= 0) close(fd);
      fd = -1;
    }
  }
  void CloseEnd(int i) {
    close(fds_[i]);
    fds_[i] = -1;
  }
  void WriteRaw(const void* p, size_t n) {
    ASSERT_EQ(write(fds_[0], p, n), static_cast<ssize_t>(n));
  }
  int fds_[2] = {-1, -1};
};

TEST_F(ShareWireFrameTest, RoundTripsThreeMebibytes) {
  std::vector<uint8_t> body = Pattern(3u << 20, 0x5a);
  absl::Status written;
  // Far more than a socket buffer: the writer blocks until the reader reads.
  std::thread writer([&] { written = WriteFrame(fds_[0], body); });
  absl::StatusOr<std::vector<uint8_t>> got = ReadFrame(fds_[1]);
  writer.join();
  ASSERT_TRUE(written.ok()) << written;
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), body.size());
  EXPECT_TRUE(*got == body);
}

TEST_F(ShareWireFrameTest, RoundTripsEmptyBodyAndBackToBackFrames) {
  ASSERT_TRUE(WriteFrame(fds_[0], {}).ok());
  std::vector<uint8_t> req = EncodeRequest(FullRequest());
  ASSERT_TRUE(WriteFrame(fds_[0], req).ok());
  ASSERT_TRUE(WriteFrame(fds_[0], {}).ok());

  absl::StatusOr<std::vector<uint8_t>> a = ReadFrame(fds_[1]);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->empty());
  absl::StatusOr<std::vector<uint8_t>> b = ReadFrame(fds_[1]);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b, req);
  absl::StatusOr<Request> q = DecodeRequest(*b);
  ASSERT_TRUE(q.ok()) << q.status();
  ExpectSameRequest(*q, FullRequest());
  absl::StatusOr<std::vector<uint8_t>> c = ReadFrame(fds_[1]);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->empty());
}

TEST_F(ShareWireFrameTest, EmptyFrameIsJustALengthOfZero) {
  ASSERT_TRUE(WriteFrame(fds_[0], {}).ok());
  CloseEnd(0);
  uint8_t buf[8];
  ASSERT_EQ(read(fds_[1], buf, sizeof(buf)), 4);
  EXPECT_EQ(buf[0] | buf[1] | buf[2] | buf[3], 0);
}

TEST_F(ShareWireFrameTest, ReadFromClosedPeerIsAnError) {
  CloseEnd(0);
  absl::StatusOr<std::vector<uint8_t>> got = ReadFrame(fds_[1]);
  EXPECT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(ShareWireFrameTest, PeerClosingMidFrameIsAnError) {
  uint32_t len = htobe32(10);
  WriteRaw(&len, sizeof(len));
  const uint8_t part[3] = {1, 2, 3};
  WriteRaw(part, sizeof(part));
  CloseEnd(0);
  EXPECT_FALSE(ReadFrame(fds_[1]).ok());
}

TEST_F(ShareWireFrameTest, PeerClosingInsideTheLengthIsAnError) {
  const uint8_t two[2] = {0, 0};
  WriteRaw(two, sizeof(two));
  CloseEnd(0);
  EXPECT_FALSE(ReadFrame(fds_[1]).ok());
}

TEST_F(ShareWireFrameTest, WriteToClosedPeerIsAnErrorNotSigpipe) {
  CloseEnd(1);
  absl::Status s = WriteFrame(fds_[0], {1, 2, 3});
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
}

TEST_F(ShareWireFrameTest, RejectsFrameLongerThanMax) {
  uint32_t len = htobe32(static_cast<uint32_t>(kMaxFrame + 1));
  WriteRaw(&len, sizeof(len));
  absl::StatusOr<std::vector<uint8_t>> got = ReadFrame(fds_[1]);
  EXPECT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);

  len = htobe32(0xffffffffu);
  WriteRaw(&len, sizeof(len));
  got = ReadFrame(fds_[1]);
  EXPECT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ShareWireFrameTest, AcceptsFrameOfExactlyMax) {
  std::vector<uint8_t> body = Pattern(kMaxFrame, 1);
  absl::Status written;
  std::thread writer([&] { written = WriteFrame(fds_[0], body); });
  absl::StatusOr<std::vector<uint8_t>> got = ReadFrame(fds_[1]);
  writer.join();
  ASSERT_TRUE(written.ok()) << written;
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == body);
}

// ---------------------------------------------------------------------------
// Durations

TEST(ShareWireDurationTest, InfiniteIsMinusOne) {
  EXPECT_EQ(DurationToMicros(absl::InfiniteDuration()), -1);
  EXPECT_EQ(MicrosToDuration(-1), absl::InfiniteDuration());
  EXPECT_EQ(MicrosToDuration(-12345), absl::InfiniteDuration());
  EXPECT_EQ(MicrosToDuration(DurationToMicros(absl::InfiniteDuration())),
            absl::InfiniteDuration());
}

TEST(ShareWireDurationTest, MicrosecondsRoundTrip) {
  EXPECT_EQ(DurationToMicros(absl::Microseconds(1500)), 1500);
  EXPECT_EQ(DurationToMicros(absl::Milliseconds(1.5)), 1500);
  EXPECT_EQ(MicrosToDuration(1500), absl::Microseconds(1500));
  EXPECT_EQ(MicrosToDuration(DurationToMicros(absl::Microseconds(1500))),
            absl::Microseconds(1500));
  EXPECT_EQ(DurationToMicros(absl::ZeroDuration()), 0);
  EXPECT_EQ(MicrosToDuration(0), absl::ZeroDuration());
  EXPECT_EQ(DurationToMicros(absl::Seconds(30)), 30'000'000);
}

}  // namespace
}  // namespace rds::share_wire
