// Unit tests for engine/wire: the 48-byte header and extension headers
// (kernel-rds.md §C.2–C.4).
#include "engine/wire.h"

#include <gtest/gtest.h>

namespace rds::wire {
namespace {

TEST(WireTest, HeaderIsBigEndianAtKernelOffsets) {
  Header h;
  h.sequence = 0x0102030405060708ULL;
  h.ack = 0x1112131415161718ULL;
  h.len = 0x21222324;
  h.sport = 0x3132;
  h.dport = 0x4142;
  h.flags = 0x05;
  h.credit = 0x06;
  h.csum = 0x5152;
  h.exthdr[0] = 0x7a;
  uint8_t b[kHeaderSize];
  Encode(h, b);
  EXPECT_EQ(b[0], 0x01);
  EXPECT_EQ(b[7], 0x08);
  EXPECT_EQ(b[8], 0x11);
  EXPECT_EQ(b[16], 0x21);
  EXPECT_EQ(b[19], 0x24);
  EXPECT_EQ(b[20], 0x31);
  EXPECT_EQ(b[22], 0x41);
  EXPECT_EQ(b[24], 0x05);
  EXPECT_EQ(b[25], 0x06);
  EXPECT_EQ(b[26] | b[27] | b[28] | b[29], 0);  // padding
  EXPECT_EQ(b[30], 0x51);
  EXPECT_EQ(b[32], 0x7a);
  EXPECT_EQ(Decode(b), h);
}

TEST(WireTest, LengthAboveOneMebibyteIsInvalid) {
  Header h;
  h.len = kMaxMessageSize;
  EXPECT_TRUE(ValidateLength(h).ok());
  h.len = kMaxMessageSize + 1;
  EXPECT_FALSE(ValidateLength(h).ok());
}

TEST(WireTest, ProbeCarriesNpathsThenGenNumAsAKernelParsesThem) {
  Header h;
  ExtWriter w(&h);
  ASSERT_TRUE(w.Npaths(8));
  ASSERT_TRUE(w.GenNum(0xdeadbeef));
  // 05 00 08 | 06 de ad be ef | 00
  EXPECT_EQ(h.exthdr[0], kExtNpaths);
  EXPECT_EQ(h.exthdr[1], 0x00);
  EXPECT_EQ(h.exthdr[2], 0x08);
  EXPECT_EQ(h.exthdr[3], kExtGenNum);
  EXPECT_EQ(h.exthdr[4], 0xde);
  EXPECT_EQ(h.exthdr[8], kExtNone);
  ExtHeaders e = ParseExtHeaders(h);
  EXPECT_EQ(e.npaths, 8);
  EXPECT_EQ(e.gen_num, 0xdeadbeefu);
}

TEST(WireTest, RdmaDestCookieIsRkeyThenOffsetBigEndianAsTheKernelWritesIt) {
  Header h;
  ASSERT_TRUE(ExtWriter(&h).RdmaDest(0x00000c8012345678ull));  // rkey 0x12345678, offset 0xc80
  // 03 12 34 56 78 00 00 0c 80 | 00 (rds-ib.md §6.5)
  const uint8_t want[] = {kExtRdmaDest, 0x12, 0x34, 0x56, 0x78, 0x00, 0x00, 0x0c, 0x80, kExtNone};
  for (size_t i = 0; i < sizeof want; ++i) EXPECT_EQ(h.exthdr[i], want[i]) << i;
  EXPECT_EQ(ParseExtHeaders(h).rdma_dest, 0x00000c8012345678ull);
  EXPECT_FALSE(ParseExtHeaders(h).rdma_rkey.has_value());
}

TEST(WireTest, RdmaRecordNamesTheRegionAKernelsOperationUsed) {
  Header h;
  h.exthdr = {kExtRdma, 0xab, 0xcd, 0x00, 0x01, kExtNone};
  ExtHeaders e = ParseExtHeaders(h);
  EXPECT_EQ(e.rdma_rkey, 0xabcd0001u);
  EXPECT_FALSE(e.rdma_dest.has_value());
}

TEST(WireTest, UnknownTypeAbove16StopsParsingLikeTheKernel) {
  Header h;
  h.exthdr = {kExtNpaths, 0, 1, 0x30, kExtGenNum, 0, 0, 0, 9};
  ExtHeaders e = ParseExtHeaders(h);
  EXPECT_EQ(e.npaths, 1);
  EXPECT_FALSE(e.gen_num.has_value());
}

TEST(WireTest, Kernel7SportIdxProbeIsUnderstood) {
  Header h;
  h.exthdr = {kExtNpaths, 0, 8, kExtGenNum, 1, 2, 3, 4, kExtSportIdx, 0, kExtNone};
  ExtHeaders e = ParseExtHeaders(h);
  EXPECT_EQ(e.npaths, 8);
  EXPECT_EQ(e.gen_num, 0x01020304u);
  EXPECT_TRUE(e.sport_idx);
}

TEST(WireTest, RecordRunningPastTheAreaIsIgnored) {
  Header h;
  h.exthdr.fill(0);
  h.exthdr[14] = kExtGenNum;  // needs 4 bytes, only 1 left
  h.exthdr[0] = 7;            // unknown type < 16: zero-length, skipped
  for (int i = 1; i < 14; ++i) h.exthdr[i] = 7;
  ExtHeaders e = ParseExtHeaders(h);
  EXPECT_FALSE(e.gen_num.has_value());
}

TEST(WireTest, WriterRefusesARecordThatDoesNotFit) {
  Header h;
  ExtWriter w(&h);
  EXPECT_TRUE(w.GenNum(1));
  EXPECT_TRUE(w.GenNum(2));
  EXPECT_TRUE(w.GenNum(3));
  EXPECT_FALSE(w.GenNum(4));  // 15 bytes used
  EXPECT_TRUE(w.ShimControl(1) == false);
}

TEST(WireTest, SpecialShapes) {
  Header h;
  h.flags = kFlagCongBitmap;
  EXPECT_TRUE(IsCongMap(h));
  h.flags = kFlagCongBitmap | kFlagRetransmitted;
  EXPECT_FALSE(IsCongMap(h));  // the kernel tests the whole byte
  h = Header();
  h.sport = 1;
  EXPECT_TRUE(IsHandshakePing(h));
  EXPECT_FALSE(IsPing(h));
  h.sport = 4000;
  EXPECT_TRUE(IsPing(h));
}

}  // namespace
}  // namespace rds::wire

namespace rds::wire {
namespace {

TEST(WireTest, ShimPayloadRefGoesAfterExistingRecordsAndStripsCleanly) {
  Header h;
  ExtWriter w(&h);
  ASSERT_TRUE(w.GenNum(0x01020304));
  ASSERT_TRUE(AddShimPayloadRef(&h, 0x1122334455667788ull));
  ExtHeaders e = ParseExtHeaders(h);
  EXPECT_EQ(e.gen_num, 0x01020304u);
  EXPECT_EQ(e.shim_payload_ref, 0x1122334455667788ull);
  uint8_t bytes[kHeaderSize];
  Encode(h, bytes);
  EXPECT_EQ(ParseExtHeaders(Decode(bytes)).shim_payload_ref, 0x1122334455667788ull);
  // 5 + 9 bytes used: a second record (9 more) does not fit.
  Header copy = h;
  EXPECT_FALSE(AddShimPayloadRef(&copy, 1));
  EXPECT_EQ(copy, h);
  StripShimPayloadRef(&h);
  e = ParseExtHeaders(h);
  EXPECT_FALSE(e.shim_payload_ref);
  EXPECT_EQ(e.gen_num, 0x01020304u) << "earlier records stay";
}

}  // namespace
}  // namespace rds::wire
