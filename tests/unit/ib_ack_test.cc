// transports/verbs/ib_ack.h: RDS acknowledgements on RDMA as the kernel keeps them
// (rds-ib.md §3).
#include "transports/verbs/ib_ack.h"

#include <vector>

#include "gtest/gtest.h"

namespace rds::ib {
namespace {

TEST(AckState, AcknowledgesTheLastCompleteMessageAndAnswersARequestOnce) {
  AckState a;
  EXPECT_FALSE(a.AckFrameDue());
  EXPECT_EQ(a.Piggyback(), 0u);  // nothing received: 0 means nothing
  a.OnMessageReceived(5, /*ack_required=*/false);
  EXPECT_FALSE(a.AckFrameDue());  // not asked: only piggybacked
  EXPECT_EQ(a.Piggyback(), 5u);
  a.OnMessageReceived(6, true);
  ASSERT_TRUE(a.AckFrameDue());
  EXPECT_EQ(a.PostAckFrame(), 6u);
  EXPECT_FALSE(a.AckFrameDue());
  a.OnMessageReceived(7, true);
  EXPECT_FALSE(a.AckFrameDue()) << "at most one ack frame in flight";
  a.OnAckFrameSent();
  ASSERT_TRUE(a.AckFrameDue());
  EXPECT_EQ(a.PostAckFrame(), 7u);
  a.OnAckFrameSent();
  a.OnMessageReceived(8, true);
  EXPECT_EQ(a.Piggyback(), 8u);
  EXPECT_FALSE(a.AckFrameDue()) << "a data header carrying the ack answered the request";
}

TEST(AckState, AppliesThePeersAcknowledgementOnlyWhenItAdvances) {
  AckState a;
  EXPECT_EQ(a.OnPeerAck(0), std::nullopt);
  EXPECT_EQ(a.OnPeerAck(3), 3u);
  EXPECT_EQ(a.OnPeerAck(3), std::nullopt);
  EXPECT_EQ(a.OnPeerAck(2), std::nullopt);
  EXPECT_EQ(a.OnPeerAck(9), 9u);
  a.Reset();  // a new connection: the kernel's i_ack_recv restarts at 0
  EXPECT_EQ(a.OnPeerAck(4), 4u);
  EXPECT_EQ(a.Piggyback(), 0u);
}

TEST(AckState, AsksForAnAcknowledgementAsTheKernelsBudgetsDo) {
  AckState a;
  std::vector<int> asked;
  for (int i = 1; i <= 20; ++i) {
    if (a.AskForAck(64, false)) asked.push_back(i);
  }
  EXPECT_EQ(asked, (std::vector<int>{1, 10, 19})) << "the first, then every ninth";
  EXPECT_TRUE(a.AskForAck(64, /*must_ask=*/true));
  a.Reset();  // after a reconnect the budget is full: the first is not asked by it
  EXPECT_FALSE(a.AskForAck(64, false));
  // With RDS's largest message (1 MiB) the packet budget runs out first.
  AckState b;
  EXPECT_TRUE(b.AskForAck(1 << 20, false));  // the first
  int n = 1;
  while (!b.AskForAck(1 << 20, false)) ++n;
  EXPECT_EQ(n, 9);
  // The byte budget, with (hypothetical) 3 MiB messages: the sixth would pass 16 MiB.
  AckState c;
  c.Reset();
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(c.AskForAck(3u << 20, false));
  EXPECT_TRUE(c.AskForAck(3u << 20, false)) << "more than 16 MiB unacknowledged";
}

}  // namespace
}  // namespace rds::ib
