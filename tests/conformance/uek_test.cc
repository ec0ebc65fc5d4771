// The Oracle UEK socket-option numbering that rds-tools is compiled with
// (rds-tools.md §2), supported next to upstream's: SOL_RDS option 8 is
// RDS_CONN_RESET when given a 12-byte struct rds_reset (upstream's
// SO_RDS_TRANSPORT takes an int), 11 is RDS6_CONN_RESET, 12 is SO_RDS_INQ,
// whose RDS_CMSG_INQ (type 12) reports the bytes still queued.
#include <gtest/gtest.h>
#include <linux/rds.h>

#include "tests/conformance/rds_test_util.h"

namespace rdstest {
namespace {

constexpr int kConnReset = 8;
constexpr int kConn6Reset = 11;
constexpr int kSoRdsInq = 12;
constexpr int kCmsgInq = 12;

struct UekReset {
  uint8_t tos;
  in_addr src;
  in_addr dst;
};
struct UekReset6 {
  uint8_t tos;
  in6_addr src;
  in6_addr dst;
};

TEST(Uek, ConnResetWithTwelveBytesSucceedsAndTrafficContinues) {
  Pair p = MakePair();
  ASSERT_TRUE(p.ok());
  RDS_ASSERT_RC(SendTo(p.s.get(), std::string("before"), p.to), 6);
  ASSERT_EQ(RecvWithin(p.r.get()).data, "before");
  UekReset r{};
  inet_pton(AF_INET, "127.0.0.1", &r.src);
  inet_pton(AF_INET, "127.0.0.1", &r.dst);
  RDS_EXPECT_RC(::setsockopt(p.s.get(), SOL_RDS, kConnReset, &r, sizeof r), 0);
  RDS_ASSERT_RC(SendTo(p.s.get(), std::string("after"), p.to), 5);
  EXPECT_EQ(RecvWithin(p.r.get()).data, "after");
}

TEST(Uek, OptionEightWithAnIntIsStillSoRdsTransport) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  int tcp = RDS_TRANS_TCP;
  RDS_EXPECT_RC(::setsockopt(s.get(), SOL_RDS, SO_RDS_TRANSPORT, &tcp, sizeof tcp), 0);
  EXPECT_EQ(GetInt(s.get(), SOL_RDS, SO_RDS_TRANSPORT), RDS_TRANS_TCP);
}

TEST(Uek, OptionEightWithAnotherLengthIsEinval) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  char buf[8] = {};
  RDS_EXPECT_ERRNO(::setsockopt(s.get(), SOL_RDS, kConnReset, buf, sizeof buf), EINVAL);
}

// Option 11 does not exist upstream (ENOPROTOOPT); only UEK's exact 36-byte
// struct rds6_reset makes it RDS6_CONN_RESET.
TEST(Uek, Conn6ResetNeedsItsExactSize) {
  Fd s = Bound6();
  ASSERT_TRUE(s.ok());
  UekReset6 r{};
  r.src = in6addr_loopback;
  r.dst = in6addr_loopback;
  RDS_EXPECT_RC(::setsockopt(s.get(), SOL_RDS, kConn6Reset, &r, sizeof r), 0);
  RDS_EXPECT_ERRNO(::setsockopt(s.get(), SOL_RDS, kConn6Reset, &r, sizeof r - 1), ENOPROTOOPT);
}

TEST(Uek, SoRdsInqReportsTheBytesStillQueued) {
  Pair p = MakePair();
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(SetInt(p.r.get(), SOL_RDS, kSoRdsInq, 1));
  RDS_ASSERT_RC(SendTo(p.s.get(), std::string("aaaa"), p.to), 4);
  RDS_ASSERT_RC(SendTo(p.s.get(), std::string("bbbbbb"), p.to), 6);
  ASSERT_GE(RecvWithin(p.r.get(), 64, kPromptMs, MSG_PEEK).n, 0);
  SleepMs(100);  // both queued
  Received first = RecvOnce(p.r.get(), 64, MSG_DONTWAIT, 64);
  ASSERT_EQ(first.n, 4);
  const cmsghdr* c = FindCmsg(first, SOL_RDS, kCmsgInq);
  ASSERT_NE(c, nullptr) << "no RDS_CMSG_INQ";
  int left;
  memcpy(&left, CMSG_DATA(c), sizeof left);
  EXPECT_EQ(left, 6);
  Received second = RecvOnce(p.r.get(), 64, MSG_DONTWAIT, 64);
  ASSERT_EQ(second.n, 6);
  c = FindCmsg(second, SOL_RDS, kCmsgInq);
  ASSERT_NE(c, nullptr);
  memcpy(&left, CMSG_DATA(c), sizeof left);
  EXPECT_EQ(left, 0);
}

TEST(Uek, WithoutSoRdsInqThereIsNoInqCmsg) {
  Pair p = MakePair();
  ASSERT_TRUE(p.ok());
  RDS_ASSERT_RC(SendTo(p.s.get(), std::string("x"), p.to), 1);
  Received r = RecvWithin(p.r.get(), 64, kPromptMs, 0, 64);
  ASSERT_EQ(r.n, 1);
  EXPECT_EQ(FindCmsg(r, SOL_RDS, kCmsgInq), nullptr);
}

}  // namespace
}  // namespace rdstest
