// RDS_CONG_MONITOR and RDS_CMSG_CONG_UPDATE — kernel-rds.md §A.4 step 10, §A.5 item 2, §A.7,
// §B.3, §B.5; DESIGN.md §2.5 and §8.
//
// Already covered elsewhere (not repeated here):
//   recvmsg_test.cc  one congested port → 0-byte recvmsg with RDS_CONG_MONITOR_MASK(port),
//                    consumed; consumed without a control buffer (MSG_CTRUNC); before data.
//   sockopt_test.cc  option sizes; turning the monitor off clears a *pending notification*.
//   poll_test.cc     POLLIN for a pending notification; monitor on ignores plain map updates.
// Added here:
//   * the mask is `port % 64` of every port a non-blocking send found congested — several ports
//     give several bits, ports equal modulo 64 share one, an uncongested destination adds none;
//   * O_NONBLOCK counts as non-blocking (the generic layer folds it into the flags);
//   * *any* map update turns the whole mask into the notification (rds_cong_map_updated is called
//     with an all-ones port mask, §B.3), including ports that are still congested;
//   * that update also clears the mask: a later update without a new ENOBUFS notifies nothing;
//   * notifications accumulate (OR) until a recvmsg consumes them;
//   * blocking sends never add to the mask (rds_cong_wait only sets it when non-blocking);
//   * an ENOBUFS while the monitor was off is not remembered; turning the monitor off clears
//     the mask (not only a pending notification);
//   * MSG_PEEK consumes the notification (DESIGN.md §8), a too-small control buffer gives
//     MSG_CTRUNC and consumes it too (put_cmsg);
//   * a blocking recvmsg is woken by a notification.
//
// Congestion only exists for non-loopback transports (§B.2), so every receiver here is a
// TcpTransportReceiver (SO_RDS_TRANSPORT = TCP on 127.0.0.1, rcvbuf 4096) and is congested by a
// separate filler socket, so the monitored socket `s` only makes the sends under test.
#include <fcntl.h>

#include <optional>

#include "tests/conformance/rds_test_util.h"

namespace rdstest {
namespace {

constexpr int kRcvbuf = 4096;

// A congestion-capable receiver bound to 127.0.0.1:port (port 0 = random).
Fd CongReceiver(uint16_t port = 0) {
  BindOpts o;
  o.transport = RDS_TRANS_TCP;
  o.rcvbuf = kRcvbuf;
  return Bound4("127.0.0.1", port, o);
}

// A base port for fixed-port tests: a random multiple of 64 well inside the port range.
uint16_t RandomBase64() {
  unsigned r = static_cast<unsigned>(Clock::now().time_since_epoch().count());
  return static_cast<uint16_t>(64 * (40 + (r >> 4) % 800));  // 2560 ... 53696
}

// Reads r below half its rcvbuf (Congest leaves 4 x 1024 + 1 bytes; 3 reads leave 1025 < 2048):
// the port is uncongested, which is a map update (§B.2, §B.3).
void Uncongest(int r) {
  for (int i = 0; i < 3; ++i) {
    Received m = RecvWithin(r);
    ASSERT_EQ(m.n, 1024) << "draining a congested receiver: " << ErrnoName(m.err);
  }
  SleepMs(kSettleMs);
}

// A non-blocking send from s to r must fail with ENOBUFS (r's port is congested).
void ExpectEnobufs(int s, int r, int flags = MSG_DONTWAIT) {
  errno = 0;
  ssize_t rc = SendTo(s, std::string("probe"), Name4(r), flags);
  int e = errno;
  EXPECT_EQ(rc, -1) << "send to a congested port succeeded";
  EXPECT_EQ(e, ENOBUFS) << ErrnoName(e);
}

// The pending notification of s, consumed by one non-blocking recvmsg with room for the cmsg:
// nullopt if recvmsg says EAGAIN (nothing pending). Anything else is a failure.
std::optional<uint64_t> TakeNotification(int s, int flags = 0) {
  Received n = RecvOnce(s, 16, MSG_DONTWAIT | flags, 64);
  if (n.n == -1 && n.err == EAGAIN) return std::nullopt;
  if (n.n != 0) {
    ADD_FAILURE() << "expected a 0-byte notification or EAGAIN, got n=" << n.n << " "
                  << ErrnoName(n.err) << " data '" << n.data << "'";
    return std::nullopt;
  }
  EXPECT_EQ(n.fromlen, 0u) << "a notification has no source address";
  const cmsghdr* c = FindCmsg(n, SOL_RDS, RDS_CMSG_CONG_UPDATE);
  if (c == nullptr) {
    ADD_FAILURE() << "0-byte recvmsg without RDS_CMSG_CONG_UPDATE";
    return std::nullopt;
  }
  EXPECT_EQ(c->cmsg_len, CMSG_LEN(sizeof(uint64_t)));
  uint64_t mask;
  memcpy(&mask, CMSG_DATA(c), sizeof mask);
  return mask;
}

#define EXPECT_NO_NOTIFICATION(s)                                                         \
  do {                                                                                    \
    std::optional<uint64_t> rds_n_ = TakeNotification(s);                                \
    EXPECT_FALSE(rds_n_.has_value()) << "unexpected notification, mask 0x" << std::hex   \
                                     << rds_n_.value_or(0);                               \
  } while (0)

uint64_t Bit(uint16_t port) { return RDS_CONG_MONITOR_MASK(port); }

// §B.5 step 2: "A non-blocking send that finds the port congested sets bit port % 64". Three
// congested ports, two of them equal modulo 64, and one uncongested destination; then one map
// update (another port's uncongestion) turns the mask into the notification.
TEST(CongMonitor, MaskHasBitPortMod64OfEachPortANonblockingSendFoundCongested) {
  const uint16_t base = RandomBase64();
  const uint16_t p1 = base + 3, p2 = base + 64 + 17, p3 = base + 128 + 3, p4 = base + 192 + 40;
  Fd r1 = CongReceiver(p1), r2 = CongReceiver(p2), r3 = CongReceiver(p3), r4 = CongReceiver(p4);
  Fd filler = TcpTransportSender();
  Fd s = TcpTransportSender();
  ASSERT_TRUE(r1.ok() && r2.ok() && r3.ok() && r4.ok() && filler.ok() && s.ok());
  ASSERT_TRUE(SetInt(s.get(), SOL_RDS, RDS_CONG_MONITOR, 1));
  for (int r : {r1.get(), r2.get(), r3.get()}) ASSERT_TRUE(Congest(filler.get(), r, kRcvbuf));

  ExpectEnobufs(s.get(), r1.get());
  ExpectEnobufs(s.get(), r2.get());
  ExpectEnobufs(s.get(), r3.get());
  // Not congested: accepted, adds nothing.
  RDS_ASSERT_RC(SendTo(s.get(), std::string("ok"), Name4(r4.get()), MSG_DONTWAIT), 2);
  SleepMs(kSettleMs);
  EXPECT_NO_NOTIFICATION(s.get());  // §B.5 step 3: only a map update makes the notification

  ASSERT_NO_FATAL_FAILURE(Uncongest(r1.get()));
  std::optional<uint64_t> mask = TakeNotification(s.get());
  ASSERT_TRUE(mask.has_value()) << "no notification after a map update";
  EXPECT_EQ(*mask, (uint64_t{1} << 3) | (uint64_t{1} << 17))
      << "mask 0x" << std::hex << *mask << " (ports " << std::dec << p1 << ", " << p2 << ", "
      << p3 << " congested, " << p4 << " not)";
  EXPECT_EQ(*mask, Bit(p1) | Bit(p2) | Bit(p3));
  EXPECT_EQ(*mask & Bit(p4), 0u);
  EXPECT_NO_NOTIFICATION(s.get());  // consumed
}

// §A.4 step 10: "Non-blocking (MSG_DONTWAIT, or O_NONBLOCK, which the generic layer folds into
// the flags)": an O_NONBLOCK socket's plain send adds to the mask as well.
TEST(CongMonitor, SendOnANonblockingFdAddsToTheMask) {
  Fd r = CongReceiver();
  Fd filler = TcpTransportSender();
  BindOpts o;
  o.transport = RDS_TRANS_TCP;
  o.type_flags = SOCK_NONBLOCK;
  Fd s = Bound4("127.0.0.1", 0, o);
  ASSERT_TRUE(r.ok() && filler.ok() && s.ok());
  ASSERT_TRUE(SetInt(s.get(), SOL_RDS, RDS_CONG_MONITOR, 1));
  ASSERT_TRUE(Congest(filler.get(), r.get(), kRcvbuf));
  ExpectEnobufs(s.get(), r.get(), /*flags=*/0);
  ASSERT_NO_FATAL_FAILURE(Uncongest(r.get()));
  std::optional<uint64_t> mask = TakeNotification(s.get());
  ASSERT_TRUE(mask.has_value()) << "O_NONBLOCK send did not add to the mask";
  EXPECT_EQ(*mask, Bit(LocalPort(r.get())));
}

// §B.3: the update is applied with an all-ones port mask, so the notification comes with the
// first map update of any port, and includes ports that are still congested.
TEST(CongMonitor, AnyMapUpdateDeliversTheMaskEvenForAPortStillCongested) {
  Fd r1 = CongReceiver(), r3 = CongReceiver();
  Fd filler = TcpTransportSender();
  Fd s = TcpTransportSender();
  ASSERT_TRUE(r1.ok() && r3.ok() && filler.ok() && s.ok());
  ASSERT_TRUE(SetInt(s.get(), SOL_RDS, RDS_CONG_MONITOR, 1));
  ASSERT_TRUE(Congest(filler.get(), r1.get(), kRcvbuf));
  ExpectEnobufs(s.get(), r1.get());
  EXPECT_NO_NOTIFICATION(s.get());
  // An update about another port (r3 becomes congested).
  ASSERT_TRUE(Congest(filler.get(), r3.get(), kRcvbuf));
  std::optional<uint64_t> mask = TakeNotification(s.get());
  ASSERT_TRUE(mask.has_value()) << "an unrelated map update did not deliver the mask";
  EXPECT_EQ(*mask, Bit(LocalPort(r1.get())));
  // r1 is still congested.
  ExpectEnobufs(filler.get(), r1.get());
}

// §B.3 "sets notify |= mask and clears mask": a second update, without a new ENOBUFS, notifies
// nothing.
TEST(CongMonitor, TheUpdateThatNotifiesClearsTheMask) {
  Fd r1 = CongReceiver(), r3 = CongReceiver();
  Fd filler = TcpTransportSender();
  Fd s = TcpTransportSender();
  ASSERT_TRUE(r1.ok() && r3.ok() && filler.ok() && s.ok());
  ASSERT_TRUE(SetInt(s.get(), SOL_RDS, RDS_CONG_MONITOR, 1));
  ASSERT_TRUE(Congest(filler.get(), r1.get(), kRcvbuf));
  ExpectEnobufs(s.get(), r1.get());
  ASSERT_TRUE(Congest(filler.get(), r3.get(), kRcvbuf));  // update 1
  std::optional<uint64_t> mask = TakeNotification(s.get());
  ASSERT_TRUE(mask.has_value());
  EXPECT_EQ(*mask, Bit(LocalPort(r1.get())));
  ASSERT_NO_FATAL_FAILURE(Uncongest(r3.get()));  // update 2
  EXPECT_NO_NOTIFICATION(s.get());
  ASSERT_NO_FATAL_FAILURE(Uncongest(r1.get()));  // update 3
  EXPECT_NO_NOTIFICATION(s.get());
}

// §B.5 step 3 "rs_cong_notify |= rs_cong_mask": notifications not yet read accumulate; one
// recvmsg returns all their bits.
TEST(CongMonitor, NotificationsAccumulateUntilARecvmsgConsumesThem) {
  const uint16_t base = RandomBase64();
  Fd r1 = CongReceiver(base + 5), r2 = CongReceiver(base + 64 + 33), r3 = CongReceiver();
  Fd filler = TcpTransportSender();
  Fd s = TcpTransportSender();
  ASSERT_TRUE(r1.ok() && r2.ok() && r3.ok() && filler.ok() && s.ok());
  ASSERT_TRUE(SetInt(s.get(), SOL_RDS, RDS_CONG_MONITOR, 1));
  ASSERT_TRUE(Congest(filler.get(), r1.get(), kRcvbuf));
  ASSERT_TRUE(Congest(filler.get(), r2.get(), kRcvbuf));
  ExpectEnobufs(s.get(), r1.get());
  ASSERT_TRUE(Congest(filler.get(), r3.get(), kRcvbuf));  // notify = bit 5
  ExpectEnobufs(s.get(), r2.get());
  ASSERT_NO_FATAL_FAILURE(Uncongest(r3.get()));  // notify |= bit 33
  std::optional<uint64_t> mask = TakeNotification(s.get());
  ASSERT_TRUE(mask.has_value());
  EXPECT_EQ(*mask, (uint64_t{1} << 5) | (uint64_t{1} << 33)) << "mask 0x" << std::hex << *mask;
  EXPECT_NO_NOTIFICATION(s.get());
}

// §A.4 step 10 / rds_cong_wait: only the non-blocking branch adds to the mask. A blocking send to
// a congested port sleeps until the port clears and leaves no notification behind.
TEST(CongMonitor, BlockingSendToACongestedPortDoesNotAddToTheMask) {
  Fd r = CongReceiver(), r3 = CongReceiver();
  Fd filler = TcpTransportSender();
  Fd s = TcpTransportSender();
  ASSERT_TRUE(r.ok() && r3.ok() && filler.ok() && s.ok());
  ASSERT_TRUE(SetInt(s.get(), SOL_RDS, RDS_CONG_MONITOR, 1));
  ASSERT_TRUE(Congest(filler.get(), r.get(), kRcvbuf));
  int sfd = s.get();
  sockaddr_in to = Name4(r.get());
  AsyncCall call([sfd, to] { return static_cast<long>(SendTo(sfd, std::string("blk"), to)); });
  LetItBlock();
  EXPECT_FALSE(call.done()) << "blocking send to a congested port returned " << call.rc() << " "
                            << ErrnoName(call.err());
  ASSERT_NO_FATAL_FAILURE(Uncongest(r.get()));  // a map update while the send is blocked
  if (!call.WaitFor(kPromptMs)) {
    r.reset();  // unblocks it (closing clears the bit) so the test can end
    ASSERT_TRUE(call.WaitFor(kPromptMs));
    FAIL() << "blocked sender not woken by the uncongestion update";
  }
  EXPECT_EQ(call.rc(), 3) << ErrnoName(call.err());
  EXPECT_NO_NOTIFICATION(s.get());
  ASSERT_TRUE(Congest(filler.get(), r3.get(), kRcvbuf));  // and no later update finds a mask
  EXPECT_NO_NOTIFICATION(s.get());
}

// §B.5 step 2 applies "if RDS_CONG_MONITOR is on": an ENOBUFS while it was off leaves nothing.
TEST(CongMonitor, EnobufsWhileTheMonitorIsOffIsNotRemembered) {
  Fd r = CongReceiver();
  Fd filler = TcpTransportSender();
  Fd s = TcpTransportSender();
  ASSERT_TRUE(r.ok() && filler.ok() && s.ok());
  ASSERT_TRUE(Congest(filler.get(), r.get(), kRcvbuf));
  ExpectEnobufs(s.get(), r.get());
  ASSERT_TRUE(SetInt(s.get(), SOL_RDS, RDS_CONG_MONITOR, 1));
  ASSERT_NO_FATAL_FAILURE(Uncongest(r.get()));
  EXPECT_NO_NOTIFICATION(s.get());
}

// §A.7: "Turning it off clears the mask and any pending notification." The mask part: on,
// ENOBUFS, off, on again, update → nothing.
TEST(CongMonitor, TurningTheMonitorOffClearsTheMask) {
  Fd r = CongReceiver();
  Fd filler = TcpTransportSender();
  Fd s = TcpTransportSender();
  ASSERT_TRUE(r.ok() && filler.ok() && s.ok());
  ASSERT_TRUE(SetInt(s.get(), SOL_RDS, RDS_CONG_MONITOR, 1));
  ASSERT_TRUE(Congest(filler.get(), r.get(), kRcvbuf));
  ExpectEnobufs(s.get(), r.get());
  ASSERT_TRUE(SetInt(s.get(), SOL_RDS, RDS_CONG_MONITOR, 0));
  ASSERT_TRUE(SetInt(s.get(), SOL_RDS, RDS_CONG_MONITOR, 1));
  ASSERT_NO_FATAL_FAILURE(Uncongest(r.get()));
  EXPECT_NO_NOTIFICATION(s.get());
}

// DESIGN.md §8: "A recvmsg with a congestion notification pending returns it (and clears it)
// whatever the flags, MSG_PEEK included" (rds_recvmsg tests rs_cong_notify before it looks at
// MSG_PEEK).
TEST(CongMonitor, MsgPeekConsumesTheNotification) {
  Fd s, r;
  uint16_t port = 0;
  ASSERT_NO_FATAL_FAILURE(MakeCongNotificationPending(&s, &r, &port));
  std::optional<uint64_t> mask = TakeNotification(s.get(), MSG_PEEK);
  ASSERT_TRUE(mask.has_value()) << "MSG_PEEK did not return the notification";
  EXPECT_EQ(*mask, Bit(port));
  EXPECT_NO_NOTIFICATION(s.get());
}

// put_cmsg with a control buffer shorter than the cmsg: MSG_CTRUNC, and (§A.5 item 2) the
// notification is consumed anyway.
TEST(CongMonitor, TooSmallControlBufferGivesMsgCtruncAndConsumesTheNotification) {
  Fd s, r;
  uint16_t port = 0;
  ASSERT_NO_FATAL_FAILURE(MakeCongNotificationPending(&s, &r, &port));
  Received n = RecvOnce(s.get(), 16, MSG_DONTWAIT, CMSG_LEN(sizeof(uint64_t)) - 1);
  ASSERT_EQ(n.n, 0) << ErrnoName(n.err);
  EXPECT_TRUE(n.msg_flags & MSG_CTRUNC);
  EXPECT_NO_NOTIFICATION(s.get());
}

// §A.5: a blocking recvmsg sleeps until a message *or a notification* is there; the
// notification wakes it and is returned (0 bytes, RDS_CMSG_CONG_UPDATE).
TEST(CongMonitor, BlockingRecvmsgIsWokenByANotification) {
  Fd r = CongReceiver();
  Fd filler = TcpTransportSender();
  Fd s = TcpTransportSender();
  ASSERT_TRUE(r.ok() && filler.ok() && s.ok());
  ASSERT_TRUE(SetInt(s.get(), SOL_RDS, RDS_CONG_MONITOR, 1));
  ASSERT_TRUE(Congest(filler.get(), r.get(), kRcvbuf));
  ExpectEnobufs(s.get(), r.get());
  ASSERT_TRUE(SetTimeoutMs(s.get(), SO_RCVTIMEO, 8000));  // bound the wait
  int sfd = s.get();
  Received got;
  AsyncCall call([sfd, &got] {
    got = RecvOnce(sfd, 16, 0, 64);
    errno = got.err;
    return static_cast<long>(got.n);
  });
  LetItBlock();
  EXPECT_FALSE(call.done()) << "recvmsg returned " << call.rc() << " with nothing pending";
  auto t0 = Clock::now();
  ASSERT_NO_FATAL_FAILURE(Uncongest(r.get()));
  ASSERT_TRUE(call.WaitFor(10000));
  EXPECT_LT(ElapsedMs(t0), kPromptMs) << "recvmsg not woken by the notification";
  ASSERT_EQ(call.rc(), 0) << ErrnoName(call.err());
  const cmsghdr* c = FindCmsg(got, SOL_RDS, RDS_CMSG_CONG_UPDATE);
  ASSERT_NE(c, nullptr) << "no RDS_CMSG_CONG_UPDATE";
  uint64_t mask;
  memcpy(&mask, CMSG_DATA(c), sizeof mask);
  EXPECT_EQ(mask, Bit(LocalPort(r.get())));
}

}  // namespace
}  // namespace rdstest
