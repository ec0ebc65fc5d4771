// Unit tests for sdp/conversation.h: sequence numbers, credits and their
// updates, urgent data, orderly and abortive close, and the protocol errors,
// between two conversations wired back to back and with hand-made messages.
#include "sdp/conversation.h"

#include <deque>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace rds::sdp {
namespace {

using Bytes = std::vector<uint8_t>;

Bytes Message(const wire::Bsdh& h, const std::string& payload = "") {
  Bytes m(wire::kBsdhSize);
  wire::EncodeBsdh(h, m.data());
  m.insert(m.end(), payload.begin(), payload.end());
  return m;
}

Conversation::Setup Sizes(uint32_t our_bufs, uint32_t peer_bufs, uint32_t buf_size = 1040) {
  Conversation::Setup s;
  s.our_bufs = our_bufs;
  s.our_buf_size = buf_size;
  s.peer_bufs = peer_bufs;
  s.peer_buf_size = buf_size;
  return s;
}

// Two ends, as the relays on both hosts would drive them: what one posts
// lands in the other's queue in order (RC).
struct Pair {
  Conversation a, b;
  std::deque<Bytes> to_a, to_b;

  static Pair Make(uint32_t bufs) {
    return Pair{*Conversation::Create(Sizes(bufs, bufs)), *Conversation::Create(Sizes(bufs, bufs)),
                {}, {}};
  }
  // Sends as much of `data` from a to b as credits allow; returns how much.
  size_t SendAtoB(const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
      size_t n = 0;
      std::optional<wire::Bsdh> h = a.NextData(data.size() - off, std::nullopt, &n);
      if (!h) break;
      to_b.push_back(Message(*h, data.substr(off, n)));
      off += n;
    }
    return off;
  }
  // b takes what arrived; reposts its buffers when `repost`.
  std::string DeliverToB(bool repost) {
    std::string got;
    while (!to_b.empty()) {
      absl::StatusOr<Conversation::Received> r = b.OnMessage(to_b.front());
      EXPECT_TRUE(r.ok()) << r.status();
      if (r.ok()) got.append(r->payload.begin(), r->payload.end());
      to_b.pop_front();
      if (repost) b.Reposted(1);
    }
    return got;
  }
  void DeliverToA() {
    while (!to_a.empty()) {
      absl::StatusOr<Conversation::Received> r = a.OnMessage(to_a.front());
      EXPECT_TRUE(r.ok()) << r.status();
      to_a.pop_front();
      a.Reposted(1);
    }
  }
};

TEST(SdpConversationTest, RefusesBuffersThatCarryNothingOrCreditsAllReserved) {
  EXPECT_FALSE(Conversation::Create(Sizes(8, 8, 16)).ok());
  EXPECT_FALSE(Conversation::Create(Sizes(8, Conversation::kReservedCredits)).ok());
  EXPECT_FALSE(Conversation::Create(Sizes(Conversation::kReservedCredits, 8)).ok());
  EXPECT_TRUE(Conversation::Create(Sizes(3, 3, 17)).ok());
}

TEST(SdpConversationTest, DataIsFramedToThePeersBuffersWithSequenceNumbersFromOne) {
  Pair p = Pair::Make(8);
  EXPECT_EQ(p.a.max_payload(), 1024u);
  size_t n = 0;
  std::optional<wire::Bsdh> h = p.a.NextData(3000, std::nullopt, &n);
  ASSERT_TRUE(h);
  EXPECT_EQ(n, 1024u);
  EXPECT_EQ(h->mid, wire::kData);
  EXPECT_EQ(h->len, 1040u);
  EXPECT_EQ(h->mseq, 1u);
  EXPECT_EQ(h->mseq_ack, 0u);
  EXPECT_EQ(h->bufs, 8);
  h = p.a.NextData(1976, std::nullopt, &n);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->mseq, 2u);
  EXPECT_FALSE(p.a.NextData(0, std::nullopt, &n));
}

TEST(SdpConversationTest, AStreamStopsAtTheReservedCreditsAndResumesAfterACreditUpdate) {
  Pair p = Pair::Make(8);
  const std::string data(20 * 1024, 'x');
  // 8 buffers, 2 kept for control messages: 6 messages of 1 KiB go.
  EXPECT_EQ(p.SendAtoB(data), 6u * 1024);
  EXPECT_EQ(p.a.tx_credits(), 2);
  // b has not reposted anything: nothing to advertise.
  EXPECT_EQ(p.DeliverToB(/*repost=*/false).size(), 6u * 1024);
  EXPECT_EQ(p.b.posted(), 2u);
  EXPECT_FALSE(p.b.NextCreditUpdate());
  // Its relay has moved the bytes on and posts the buffers again: the peer's
  // view (8 advertised, 6 used since) is below half of 8.
  p.b.Reposted(6);
  std::optional<wire::Bsdh> update = p.b.NextCreditUpdate();
  ASSERT_TRUE(update);
  EXPECT_EQ(update->len, wire::kBsdhSize);
  EXPECT_EQ(update->bufs, 8);
  EXPECT_EQ(update->mseq_ack, 6u);
  EXPECT_FALSE(p.b.NextCreditUpdate());  // told once
  p.to_a.push_back(Message(*update));
  p.DeliverToA();
  // 8 posted, all 6 acknowledged: 8 credits again, 6 of them for data.
  EXPECT_EQ(p.a.tx_credits(), 8);
  EXPECT_EQ(p.SendAtoB(data.substr(6 * 1024)), 6u * 1024);
}

TEST(SdpConversationTest, NoCreditUpdateWhileThePeersViewIsAboveHalf) {
  Pair p = Pair::Make(8);
  p.SendAtoB(std::string(3 * 1024, 'y'));
  p.DeliverToB(/*repost=*/true);
  // Peer's view 8 - 3 = 5 of 8 posted: not due.
  EXPECT_FALSE(p.b.NextCreditUpdate());
  p.SendAtoB(std::string(1024, 'y'));
  p.DeliverToB(/*repost=*/true);
  EXPECT_TRUE(p.b.NextCreditUpdate());  // 4 of 8
}

TEST(SdpConversationTest, EveryMessageAcknowledgesAndAdvertises) {
  Pair p = Pair::Make(8);
  p.SendAtoB("ping");
  p.DeliverToB(/*repost=*/true);
  size_t n = 0;
  std::optional<wire::Bsdh> reply = p.b.NextData(4, std::nullopt, &n);
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->mseq, 1u);
  EXPECT_EQ(reply->mseq_ack, 1u);
  EXPECT_EQ(reply->bufs, 8);
  p.to_a.push_back(Message(*reply, "pong"));
  p.DeliverToA();
  EXPECT_EQ(p.a.tx_credits(), 8);
}

TEST(SdpConversationTest, TheUrgentByteEndsItsMessageWithBothFlags) {
  Pair p = Pair::Make(8);
  size_t n = 0;
  std::optional<wire::Bsdh> h = p.a.NextData(10, /*urgent=*/4, &n);
  ASSERT_TRUE(h);
  EXPECT_EQ(n, 5u);
  EXPECT_EQ(h->flags, wire::kFlagOobPres | wire::kFlagOobPend);
  const Bytes urgent = Message(*h, "abcd!");  // (the payload is a view into it)
  absl::StatusOr<Conversation::Received> r = p.b.OnMessage(urgent);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->urgent);
  EXPECT_TRUE(r->urgent_pending);
  EXPECT_EQ(std::string(r->payload.begin(), r->payload.end()), "abcd!");
  // Beyond one message: the first goes without the flags.
  h = p.a.NextData(3000, /*urgent=*/2000, &n);
  ASSERT_TRUE(h);
  EXPECT_EQ(n, 1024u);
  EXPECT_EQ(h->flags, 0);
}

TEST(SdpConversationTest, DisConnEndsEachStreamAndBothEndTheConnection) {
  Pair p = Pair::Make(8);
  p.SendAtoB("last words");
  std::optional<wire::Bsdh> fin = p.a.NextDisConn();
  ASSERT_TRUE(fin);
  EXPECT_EQ(fin->mid, wire::kDisConn);
  EXPECT_EQ(fin->mseq, 2u);
  EXPECT_FALSE(p.a.NextDisConn());
  size_t n = 0;
  EXPECT_FALSE(p.a.NextData(5, std::nullopt, &n));
  p.to_b.push_back(Message(*fin));
  EXPECT_EQ(p.DeliverToB(/*repost=*/true), "last words");
  EXPECT_TRUE(p.b.received_disconn());
  EXPECT_FALSE(p.b.closed());
  // b still sends (a half-close), then its own DisConn.
  ASSERT_TRUE(p.b.NextData(5, std::nullopt, &n));
  std::optional<wire::Bsdh> fin_b = p.b.NextDisConn();
  ASSERT_TRUE(fin_b);
  EXPECT_TRUE(p.b.closed());
  EXPECT_FALSE(p.b.NextData(5, std::nullopt, &n));
}

TEST(SdpConversationTest, AfterItsDisConnASideStillGrantsCredits) {
  Pair p = Pair::Make(8);
  p.to_b.push_back(Message(*p.a.NextDisConn()));
  p.DeliverToB(/*repost=*/true);
  // b streams to a, which has said its last word but still receives.
  EXPECT_EQ(p.SendAtoB(""), 0u);
  const std::string data(6 * 1024, 'r');
  size_t off = 0, n = 0;
  while (std::optional<wire::Bsdh> h = p.b.NextData(data.size() - off, std::nullopt, &n)) {
    p.to_a.push_back(Message(*h, data.substr(off, n)));
    off += n;
  }
  p.DeliverToA();
  std::optional<wire::Bsdh> update = p.a.NextCreditUpdate();
  ASSERT_TRUE(update) << "a cannot grant credits after its DisConn";
  absl::StatusOr<Conversation::Received> r = p.b.OnMessage(Message(*update));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(p.b.can_send_data());
}

TEST(SdpConversationTest, DataAfterTheDisConnIsAnError) {
  Conversation c = *Conversation::Create(Sizes(8, 8));
  wire::Bsdh h;
  h.mid = wire::kDisConn;
  h.len = wire::kBsdhSize;
  h.mseq = 1;
  ASSERT_TRUE(c.OnMessage(Message(h)).ok());
  h.mid = wire::kData;
  h.mseq = 2;
  h.len = wire::kBsdhSize + 1;
  EXPECT_FALSE(c.OnMessage(Message(h, "x")).ok());
  EXPECT_TRUE(c.aborted());
}

TEST(SdpConversationTest, AbortConnResetsAndEndsTheConversation) {
  Pair p = Pair::Make(8);
  std::optional<wire::Bsdh> abort = p.a.NextAbortConn();
  ASSERT_TRUE(abort);
  EXPECT_EQ(abort->mid, wire::kAbortConn);
  EXPECT_TRUE(p.a.aborted());
  EXPECT_FALSE(p.a.NextAbortConn());
  size_t n = 0;
  EXPECT_FALSE(p.a.NextData(1, std::nullopt, &n));
  absl::StatusOr<Conversation::Received> r = p.b.OnMessage(Message(*abort));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->kind, Conversation::Kind::kAbortConn);
  EXPECT_TRUE(p.b.aborted());
  EXPECT_FALSE(p.b.OnMessage(Message(*abort)).ok());
}

TEST(SdpConversationTest, ProtocolErrorsAbort) {
  auto fresh = [] { return *Conversation::Create(Sizes(8, 8)); };
  wire::Bsdh h;
  h.mid = wire::kData;
  h.len = wire::kBsdhSize;
  h.mseq = 1;
  {
    Conversation c = fresh();
    wire::Bsdh skipped = h;
    skipped.mseq = 2;
    absl::StatusOr<Conversation::Received> r = c.OnMessage(Message(skipped));
    EXPECT_FALSE(r.ok());
    EXPECT_TRUE(c.aborted());
  }
  {
    Conversation c = fresh();
    wire::Bsdh big = h;
    big.len = 1041;
    EXPECT_FALSE(c.OnMessage(Message(big, std::string(1025, 'z'))).ok());
  }
  {
    Conversation c = fresh();
    wire::Bsdh wrong_len = h;
    wrong_len.len = 20;
    EXPECT_FALSE(c.OnMessage(Message(wrong_len, "abc")).ok());
  }
  {
    Conversation c = fresh();
    wire::Bsdh acked_ahead = h;
    acked_ahead.mseq_ack = 1;  // we have sent nothing
    EXPECT_FALSE(c.OnMessage(Message(acked_ahead)).ok());
  }
  {
    Conversation c = fresh();
    wire::Bsdh zcopy = h;
    zcopy.mid = wire::kSrcAvail;
    absl::StatusOr<Conversation::Received> r = c.OnMessage(Message(zcopy));
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented);
  }
  {
    Conversation c = *Conversation::Create(Sizes(3, 8));
    for (uint32_t i = 1; i <= 3; ++i) {
      wire::Bsdh m = h;
      m.mseq = i;
      ASSERT_TRUE(c.OnMessage(Message(m)).ok());
    }
    wire::Bsdh fourth = h;
    fourth.mseq = 4;
    EXPECT_FALSE(c.OnMessage(Message(fourth)).ok());  // no buffer was posted for it
  }
}

}  // namespace
}  // namespace rds::sdp
