// Unit tests for engine/control: the shim's hello and control messages.
#include "engine/control.h"

#include <gtest/gtest.h>

namespace rds::control {
namespace {

TEST(ControlTest, HelloRoundTripsAndLooksLikeAKernelProbe) {
  Hello h;
  h.kind = HelloKind::kLink;
  h.pid = 1234;
  h.gen = 0xabcdef01;
  h.uid = 1000;
  h.ns = {5, 4026531840};
  in_addr a;
  a.s_addr = htonl(0x0a000001);
  h.from_addr = RdsAddr::FromV4(a);
  a.s_addr = htonl(0x0a000002);
  h.to_addr = RdsAddr::FromV4(a);
  h.target_pid = 99;
  MessagePtr m = EncodeHello(h);
  EXPECT_TRUE(wire::IsHandshakePing(m->header));
  wire::ExtHeaders e = wire::ParseExtHeaders(m->header);
  EXPECT_EQ(e.npaths, wire::kNpathsAdvertised);
  EXPECT_EQ(e.gen_num, h.gen);
  EXPECT_TRUE(e.shim_hello);
  absl::StatusOr<Hello> back = DecodeHello(m->header, m->payload);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->pid, 1234u);
  EXPECT_EQ(back->target_pid, 99u);
  EXPECT_EQ(back->ns, h.ns);
  EXPECT_EQ(back->to_addr, h.to_addr);
}

TEST(ControlTest, ReplyIsShapedAsAPong) {
  Hello h;
  h.kind = HelloKind::kReply;
  h.result = HelloResult::kAnswer;
  h.answer_pid = 7;
  MessagePtr m = EncodeHello(h);
  EXPECT_TRUE(wire::IsHandshakePong(m->header));
  EXPECT_EQ(DecodeHello(m->header, m->payload)->answer_pid, 7u);
}

TEST(ControlTest, ResumeAckRoundTripsAndIsOptional) {
  Hello h;
  h.ack = 0x0102030405060708ULL;
  h.socket_id = 0x1112131415161718ULL;
  MessagePtr m = EncodeHello(h);
  EXPECT_EQ(DecodeHello(m->header, m->payload)->ack, h.ack);
  EXPECT_EQ(DecodeHello(m->header, m->payload)->socket_id, h.socket_id);
  // A hello that ends before the optional fields (ack, info option, socket
  // id, relay role) means 0.
  Payload without(m->payload.data(),
                  m->payload.size() - 2 * sizeof(uint64_t) - sizeof(uint32_t) - 1);
  absl::StatusOr<Hello> old = DecodeHello(m->header, without);
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->ack, 0u);
  EXPECT_EQ(old->socket_id, 0u);
  EXPECT_EQ(old->relay, Relay::kNone);
}

TEST(ControlTest, RelayRoleRoundTripsAndUnknownRolesAreRejected) {
  Hello h;
  h.relay = Relay::kFromOwner;
  MessagePtr m = EncodeHello(h);
  EXPECT_EQ(DecodeHello(m->header, m->payload)->relay, Relay::kFromOwner);
  h.relay = Relay::kToOwner;
  m = EncodeHello(h);
  EXPECT_EQ(DecodeHello(m->header, m->payload)->relay, Relay::kToOwner);
  h.relay = Relay::kNodeConnection;
  m = EncodeHello(h);
  EXPECT_EQ(DecodeHello(m->header, m->payload)->relay, Relay::kNodeConnection);
  Payload bad(m->payload.data(), m->payload.size());
  bad.data()[bad.size() - 1] = 4;
  EXPECT_FALSE(DecodeHello(m->header, bad).ok());
}

TEST(ControlTest, TruncatedOrForeignHelloIsRejected) {
  Hello h;
  MessagePtr m = EncodeHello(h);
  Payload shorter(m->payload.data(), m->payload.size() - 2);  // into the socket id
  EXPECT_FALSE(DecodeHello(m->header, shorter).ok());
  wire::Header plain_probe;
  plain_probe.sport = 1;
  EXPECT_FALSE(DecodeHello(plain_probe, Payload()).ok());  // a kernel's probe is not a hello
}

TEST(ControlTest, ControlRoundTrips) {
  Control c;
  c.op = Op::kRouteReply;
  c.query_id = 5;
  c.port = 4000;
  c.owner_pid = 321;
  MessagePtr m = EncodeControl(c);
  EXPECT_TRUE(wire::IsShimControl(m->header));
  absl::StatusOr<Control> back = DecodeControl(m->header, m->payload);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->op, Op::kRouteReply);
  EXPECT_EQ(back->port, 4000);
  EXPECT_EQ(back->owner_pid, 321u);
}

// An info answer larger than one RDS message (an engine with thousands of sockets) goes in
// parts, each within the message size limit, and is put back together byte for byte.
TEST(ControlTest, LargeInfoAnswerGoesInPartsThatReassemble) {
  for (size_t size : {size_t{0}, size_t{100}, kInfoPartBytes, kInfoPartBytes + 1,
                      size_t{5} * kInfoPartBytes / 2, size_t{4} << 20}) {
    std::vector<uint8_t> bytes(size);
    for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<uint8_t>(i * 7 + i / 4096);
    std::vector<MessagePtr> msgs = EncodeInfoAnswer(36, bytes);
    ASSERT_EQ(msgs.size(), size <= kInfoPartBytes ? 1u : (size + kInfoPartBytes - 1) / kInfoPartBytes)
        << size;
    InfoAnswerReader reader;
    for (size_t i = 0; i < msgs.size(); ++i) {
      EXPECT_LE(msgs[i]->payload.size(), wire::kMaxMessageSize);
      EXPECT_FALSE(reader.complete());
      absl::StatusOr<Control> c = DecodeControl(msgs[i]->header, msgs[i]->payload);
      ASSERT_TRUE(c.ok()) << c.status();
      EXPECT_EQ(c->op, i + 1 == msgs.size() ? Op::kInfoData : Op::kInfoDataPart);
      ASSERT_TRUE(reader.Add(std::move(*c)).ok());
    }
    EXPECT_TRUE(reader.complete());
    EXPECT_EQ(reader.each(), 36u);
    EXPECT_EQ(reader.bytes(), bytes) << size;
  }
}

TEST(ControlTest, InfoAnswerReaderRejectsOtherMessagesAndExtraParts) {
  InfoAnswerReader reader;
  Control ack;
  ack.op = Op::kAck;
  EXPECT_FALSE(reader.Add(std::move(ack)).ok());
  Control last;
  last.op = Op::kInfoData;
  ASSERT_TRUE(reader.Add(std::move(last)).ok());
  Control extra;
  extra.op = Op::kInfoDataPart;
  EXPECT_FALSE(reader.Add(std::move(extra)).ok());
}

}  // namespace
}  // namespace rds::control

namespace rds::control {
namespace {

TEST(ControlTest, U64ListsRoundTripAndMalformedOnesAreRejected) {
  const uint64_t values[] = {0, 1 << 16, ~uint64_t{0}};
  MessagePtr m = EncodeU64List(Op::kArenaRelease, values);
  absl::StatusOr<Control> c = DecodeControl(m->header, m->payload);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->op, Op::kArenaRelease);
  absl::StatusOr<std::vector<uint64_t>> got = DecodeU64List(*c);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, std::vector<uint64_t>(std::begin(values), std::end(values)));
  c->data.pop_back();
  EXPECT_FALSE(DecodeU64List(*c).ok());
  c->data.assign(8 * (kMaxU64ListValues + 1), 0);
  EXPECT_FALSE(DecodeU64List(*c).ok());
}

}  // namespace
}  // namespace rds::control
