// Unit tests for send-buffer accounting (engine/send.h, RdsSocket::AdmitLocked
// and ReleaseLocked): a socket with admitted messages stays alive for them
// without a reference count per message, space and the socket come back when
// the last message is released (one at a time or in runs), and releases are
// counted per socket.
#include <gtest/gtest.h>

#include <memory>

#include "engine/message.h"
#include "engine/send.h"
#include "engine/socket.h"

namespace rds {
namespace {

std::shared_ptr<RdsSocket> NewSocket(uint64_t id) {
  return std::make_shared<RdsSocket>(id, nullptr, /*nonblocking=*/false);
}

// What SendMsg does on admission: count, then name the sender.
MessagePtr Admit(RdsSocket& rs, size_t len) {
  MessagePtr m = NewMessage();
  m->payload = Payload(len);
  rds::MutexLock lock(&rs.mu);
  rs.AdmitLocked(len);
  m->sender = &rs;
  return m;
}

size_t SndBytes(RdsSocket& rs) {
  rds::MutexLock lock(&rs.mu);
  return rs.snd_bytes;
}

TEST(SendSpaceTest, AdmittedMessagesKeepTheSocketAliveUntilTheLastIsReleased) {
  auto rs = NewSocket(1);
  std::weak_ptr<RdsSocket> weak = rs;
  MessagePtr a = Admit(*rs, 100);
  MessagePtr b = Admit(*rs, 50);
  EXPECT_EQ(SndBytes(*rs), 150u);
  rs.reset();  // the application closed it: only its messages hold it
  ASSERT_FALSE(weak.expired());
  ReleaseSendSpace(*a);
  EXPECT_EQ(a->sender, nullptr);
  ASSERT_FALSE(weak.expired()) << "one message still counts";
  EXPECT_EQ(SndBytes(*weak.lock()), 50u);
  ReleaseSendSpace(*b);
  EXPECT_TRUE(weak.expired()) << "the last release drops the pin";
}

TEST(SendSpaceTest, AReleaseIsCountedOnceAndAgainAfterReadmission) {
  auto rs = NewSocket(2);
  MessagePtr a = Admit(*rs, 10);
  ReleaseSendSpace(*a);
  ReleaseSendSpace(*a);  // already released: nothing
  EXPECT_EQ(SndBytes(*rs), 0u);
  {
    rds::MutexLock lock(&rs->mu);
    EXPECT_EQ(rs->snd_msgs, 0u);
    EXPECT_EQ(rs->in_flight_pin, nullptr);
  }
  std::weak_ptr<RdsSocket> weak = rs;
  MessagePtr b = Admit(*rs, 20);
  rs.reset();
  ASSERT_FALSE(weak.expired()) << "pinned again by a new admission";
  ReleaseSendSpace(*b);
  EXPECT_TRUE(weak.expired());
}

TEST(SendSpaceTest, RunsOfMessagesAreReleasedPerSocket) {
  auto x = NewSocket(4);
  auto y = NewSocket(5);
  std::vector<MessagePtr> ms = {Admit(*x, 1), Admit(*x, 2), Admit(*y, 4), Admit(*x, 8),
                                Admit(*y, 16)};
  std::weak_ptr<RdsSocket> wx = x, wy = y;
  x.reset();
  y.reset();
  {
    SendSpaceRelease release;
    for (MessagePtr& m : ms) release.Add(*m);
    // Each run is given back when the next message is from another socket;
    // the last run waits for Flush (here: the destructor).
    ASSERT_FALSE(wy.expired());
  }
  EXPECT_TRUE(wx.expired());
  EXPECT_TRUE(wy.expired());
  for (MessagePtr& m : ms) EXPECT_EQ(m->sender, nullptr);
}

}  // namespace
}  // namespace rds
