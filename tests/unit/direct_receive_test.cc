// Unit tests for engine/direct_receive: the offer's states — lent to a
// reassembler, given back when the lent payload is dropped (the offer stands
// again), taken back mid-payload on withdrawal, completed for the waiting call
// — and the per-thread object being reused only once nothing refers to it.
#include "engine/direct_receive.h"

#include <gtest/gtest.h>

#include <vector>

#include "transports/stream/reassembler.h"
#include "engine/waiter.h"

namespace rds {
namespace {

std::vector<uint8_t> Frame(uint32_t len, uint8_t fill) {
  wire::Header h;
  h.dport = 9;
  h.len = len;
  std::vector<uint8_t> out(wire::kHeaderSize + len, fill);
  wire::Encode(h, out.data());
  return out;
}

TEST(DirectReceiveTest, ALentPayloadDroppedLeavesTheOfferStanding) {
  std::shared_ptr<DirectReceive> d = DirectReceive::ForThisThread();
  std::vector<uint8_t> buffer(100000);
  d->Prepare(buffer.data(), buffer.size(), &Waiter::ForThisThread());
  Reassembler r;
  EXPECT_FALSE(d->Lend(buffer.size() + 1, r)) << "larger than the buffer";
  std::optional<Payload> p = d->Lend(5000, r);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->data(), buffer.data());
  EXPECT_EQ(DirectReceive::LenderOf(*p), d.get());
  EXPECT_FALSE(d->Lend(5000, r)) << "one payload at a time";
  p.reset();  // dropped (a duplicate, a reset link): lendable again
  std::optional<Payload> again = d->Lend(7000, r);
  ASSERT_TRUE(again);
  again.reset();
  d->Withdraw();
  EXPECT_FALSE(d->Lend(10, r)) << "withdrawn";
}

TEST(DirectReceiveTest, WithdrawingMidPayloadMovesItOutOfTheBuffer) {
  std::shared_ptr<DirectReceive> d = DirectReceive::ForThisThread();
  std::vector<uint8_t> buffer(100000, 0);
  d->Prepare(buffer.data(), buffer.size(), &Waiter::ForThisThread());
  Reassembler r;
  r.SetPayloadStorage([&](const wire::Header& h, PayloadFiller& filler) { return d->Lend(h.len, filler); },
                      1024);
  std::vector<uint8_t> stream = Frame(80000, 'w');
  std::vector<Payload> got;
  auto sink = [&](wire::Header&&, Payload&& p) { got.push_back(std::move(p)); };
  ASSERT_TRUE(r.Feed({stream.data(), 20000}, sink).ok());
  EXPECT_EQ(buffer[0], 'w') << "read straight into the buffer";
  d->Withdraw();  // the recvmsg leaves (timeout, signal)
  std::fill(buffer.begin(), buffer.end(), 0);
  ASSERT_TRUE(r.Feed({stream.data() + 20000, stream.size() - 20000}, sink).ok());
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(DirectReceive::LenderOf(got[0]), nullptr);
  EXPECT_EQ(got[0].data()[0], 'w');
  EXPECT_EQ(got[0].data()[79999], 'w');
  EXPECT_EQ(buffer[0], 0) << "the application's buffer is its own again";
}

TEST(DirectReceiveTest, ACompletedMessageIsTheWaitingCallsAndTheObjectIsReusedAfterIt) {
  std::shared_ptr<DirectReceive> d = DirectReceive::ForThisThread();
  std::vector<uint8_t> buffer(100000);
  Waiter& w = Waiter::ForThisThread();
  w.Reset();
  d->Prepare(buffer.data(), buffer.size(), &w);
  Reassembler r;
  std::optional<Payload> p = d->Lend(3000, r);
  ASSERT_TRUE(p);
  MessagePtr m = NewMessage();
  m->payload = std::move(*p);
  d->Complete(std::move(m));
  EXPECT_TRUE(w.TakeWake()) << "the offering thread is woken";
  d->Withdraw();  // leaving the drive keeps the completed message
  MessagePtr got = d->TakeMessage();
  ASSERT_TRUE(got);
  EXPECT_EQ(got->payload.data(), buffer.data());
  // While the returned message lives, this thread's next recvmsg gets another object.
  EXPECT_NE(DirectReceive::ForThisThread().get(), d.get());
  DirectReceive* current = DirectReceive::ForThisThread().get();
  got.reset();
  d.reset();
  EXPECT_EQ(DirectReceive::ForThisThread().get(), current) << "idle: reused";
}

}  // namespace
}  // namespace rds
