// Unit tests for sdp/wire: the BSDH's bytes, Hello / HelloAck at their
// offsets (sdp.md §1.4), a Hello truncated as the RDMA CM's TCP port space
// carries it, what decoding refuses, and the credit rule across wrap-around.
#include "sdp/wire.h"

#include <gtest/gtest.h>

#include <vector>

namespace rds::sdp::wire {
namespace {

TEST(SdpWire, BsdhFieldsAreBigEndianAtTheirOffsets) {
  Bsdh h;
  h.mid = kData;
  h.flags = kFlagOobPres | kFlagOobPend;
  h.bufs = 0x0102;
  h.len = 0x03040506;
  h.mseq = 0x0708090a;
  h.mseq_ack = 0x0b0c0d0e;
  uint8_t b[kBsdhSize];
  EncodeBsdh(h, b);
  const uint8_t want[kBsdhSize] = {0xff, 0x03, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06,
                                   0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e};
  EXPECT_EQ(std::vector<uint8_t>(b, b + kBsdhSize), std::vector<uint8_t>(want, want + kBsdhSize));
  Bsdh back = DecodeBsdh(b);
  EXPECT_EQ(back.mid, h.mid);
  EXPECT_EQ(back.flags, h.flags);
  EXPECT_EQ(back.bufs, h.bufs);
  EXPECT_EQ(back.len, h.len);
  EXPECT_EQ(back.mseq, h.mseq);
  EXPECT_EQ(back.mseq_ack, h.mseq_ack);
}

Hello SampleHello() {
  Hello h;
  h.bsdh.bufs = 64;
  h.ip_version = 4;
  h.max_adverts = 1;
  h.desired_remote_rcv_size = 0x8010;
  h.local_rcv_size = 0x8010;
  h.src_port = 40000;
  h.src_ip[15] = 1, h.src_ip[12] = 10;  // 10.0.0.1 in the last four bytes
  h.dst_ip[15] = 2, h.dst_ip[12] = 10;
  return h;
}

TEST(SdpWire, HelloIs92BytesWithItsFieldsAtTheirOffsets) {
  const auto a = EncodeHello(SampleHello());
  ASSERT_EQ(a.size(), 92u);
  EXPECT_EQ(a[0], kHello);
  EXPECT_EQ(a[7], 92) << "Len";
  EXPECT_EQ(a[3], 64) << "Bufs";
  EXPECT_EQ(a[16], 0x22) << "version 2.2";
  EXPECT_EQ(a[17], 0x40) << "IPv4, no capabilities";
  EXPECT_EQ(a[19], 1) << "MaxAdverts";
  EXPECT_EQ(a[26], 0x80);
  EXPECT_EQ(a[27], 0x10) << "LocalRcvSz";
  EXPECT_EQ((a[28] << 8) | a[29], 40000) << "source port";
  EXPECT_EQ(a[32], 0) << "IPv4 is not v4-mapped";
  EXPECT_EQ(a[44], 10);
  EXPECT_EQ(a[47], 1);
  EXPECT_EQ(a[63], 2);
  auto back = DecodeHello(a);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->bsdh.bufs, 64);
  EXPECT_EQ(back->local_rcv_size, 0x8010u);
  EXPECT_EQ(back->src_port, 40000);
  EXPECT_EQ(back->src_ip, SampleHello().src_ip);
  EXPECT_EQ(back->dst_ip, SampleHello().dst_ip);
}

TEST(SdpWire, AHelloTruncatedToTheCmsTcpPrivateDataDecodes) {
  const auto a = EncodeHello(SampleHello());
  auto back = DecodeHello(absl::MakeConstSpan(a.data(), 56));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->src_port, 40000);
  EXPECT_EQ(back->src_ip, SampleHello().src_ip);
  EXPECT_EQ(back->dst_ip[15], 0) << "beyond what arrived reads as zero";
  EXPECT_FALSE(DecodeHello(absl::MakeConstSpan(a.data(), kHelloMinSize - 1)).ok());
}

TEST(SdpWire, HelloDecodingRefusesWhatGen2Refused) {
  auto bad = [](auto mutate) {
    auto a = EncodeHello(SampleHello());
    mutate(a);
    return DecodeHello(a).ok();
  };
  EXPECT_FALSE(bad([](auto& a) { a[0] = kHelloAck; }));
  EXPECT_FALSE(bad([](auto& a) { a[16] = 0x11; })) << "gen1's version";
  EXPECT_FALSE(bad([](auto& a) { a[17] = 0x50; })) << "IP version 5";
  EXPECT_FALSE(bad([](auto& a) { a[19] = 0; })) << "MaxAdverts 0";
  EXPECT_FALSE(bad([](auto& a) { a[24] = a[25] = a[26] = 0, a[27] = 16; })) << "no room for data";
  EXPECT_TRUE(bad([](auto& a) { a[16] = 0x21; })) << "any 2.x";
}

TEST(SdpWire, HelloAckRoundTripsAndTakesGen1sReservedIpVersion) {
  HelloAck h;
  h.bsdh.bufs = 32;
  h.ip_version = 6;
  h.actual_rcv_size = 0x8010;
  auto a = EncodeHelloAck(h);
  ASSERT_EQ(a.size(), 196u);
  EXPECT_EQ(a[0], kHelloAck);
  EXPECT_EQ(a[7], 196);
  EXPECT_EQ(a[17], 0x60);
  auto back = DecodeHelloAck(a);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->bsdh.bufs, 32);
  EXPECT_EQ(back->ip_version, 6);
  EXPECT_EQ(back->actual_rcv_size, 0x8010u);
  a[17] = 0;
  back = DecodeHelloAck(a);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->ip_version, 4);
  EXPECT_FALSE(DecodeHelloAck(absl::MakeConstSpan(a.data(), 23)).ok());
}

TEST(SdpWire, CreditsArePostedBuffersMinusUnacknowledgedMessages) {
  EXPECT_EQ(TxCredits(64, 0, 1), 64) << "nothing sent yet (the first message is 1)";
  EXPECT_EQ(TxCredits(64, 5, 11), 59) << "messages 6..10 unacknowledged";
  EXPECT_EQ(TxCredits(4, 5, 11), -1) << "the peer shrank its ring: none";
  EXPECT_EQ(TxCredits(64, 0xfffffffe, 3), 60) << "across the wrap: 0xffffffff, 0, 1, 2";
}

TEST(SdpWire, InBandMessagesAreCheckedAgainstWhatArrived) {
  Bsdh h;
  h.mid = kData;
  h.len = 100;
  EXPECT_TRUE(CheckInBand(h, 100).ok());
  EXPECT_FALSE(CheckInBand(h, 99).ok());
  EXPECT_FALSE(CheckInBand(h, 10).ok());
  h.mid = kHello;
  EXPECT_FALSE(CheckInBand(h, 100).ok());
  h.mid = 0x42;
  EXPECT_FALSE(CheckInBand(h, 100).ok()) << "unknown MID";
  h.mid = kDisConn;
  h.len = kBsdhSize;
  EXPECT_TRUE(CheckInBand(h, kBsdhSize).ok());
}

}  // namespace
}  // namespace rds::sdp::wire
