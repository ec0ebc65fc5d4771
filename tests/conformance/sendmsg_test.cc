// sendmsg()/sendto()/send()/write() — kernel-rds.md §A.4 (rds_sendmsg and the order of its
// checks), §B.2/§B.4 (congestion as seen by a sender), §C.8 (ping), §E.14.
#include <stdlib.h>
#include <sys/uio.h>

#include "tests/conformance/rds_test_util.h"

namespace rdstest {
namespace {

// Local memory for RDMA/atomic cmsgs (page aligned, so page counting is exact).
alignas(4096) char g_rdma_local[4096];
alignas(8) uint64_t g_atomic_local;

rds_iovec g_local_vec;

rds_rdma_args WellFormedRdmaArgs(uint64_t remote_bytes) {
  g_local_vec.addr = reinterpret_cast<uint64_t>(g_rdma_local);
  g_local_vec.bytes = sizeof g_rdma_local;
  rds_rdma_args a{};
  a.cookie = 0x0000000100000001ull;
  a.remote_vec.addr = 0;
  a.remote_vec.bytes = remote_bytes;
  a.local_vec_addr = reinterpret_cast<uint64_t>(&g_local_vec);
  a.nr_local = 1;
  a.flags = 0;
  a.user_token = 7;
  return a;
}

// Raises the RDS sndbuf of fd to at least `bytes` (SO_SNDBUF, else SO_SNDBUFFORCE).
bool RaiseSndbuf(int fd, int bytes) {
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
  if (RdsSndbuf(fd) >= bytes) return true;
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof bytes);
  return RdsSndbuf(fd) >= bytes;
}

// ---- §A.4 step 1: flags ----------------------------------------------------------------------

void ExpectFlagRejected(int flag) {
  Pair p = MakePair();
  ASSERT_TRUE(p.ok());
  RDS_EXPECT_ERRNO(SendTo(p.s.get(), std::string("x"), p.to, flag), EOPNOTSUPP);
  ExpectNothingWithin(p.r.get(), 100);
}

TEST(Sendmsg, SendmsgWithMsgNosignalGivesEopnotsupp) { ExpectFlagRejected(MSG_NOSIGNAL); }
TEST(Sendmsg, SendmsgWithMsgMoreGivesEopnotsupp) { ExpectFlagRejected(MSG_MORE); }
TEST(Sendmsg, SendmsgWithMsgEorGivesEopnotsupp) { ExpectFlagRejected(MSG_EOR); }
TEST(Sendmsg, SendmsgWithMsgConfirmGivesEopnotsupp) { ExpectFlagRejected(MSG_CONFIRM); }
TEST(Sendmsg, SendmsgWithMsgOobGivesEopnotsupp) { ExpectFlagRejected(MSG_OOB); }

// The flag check is the very first one: it wins over ENOTCONN and over a bad name.
TEST(Sendmsg, SendmsgFlagCheckComesBeforeEveryOtherCheck) {
  Fd s = RdsSocket();  // unbound, unconnected
  ASSERT_TRUE(s.ok());
  RDS_EXPECT_ERRNO(::send(s.get(), "x", 1, MSG_NOSIGNAL), EOPNOTSUPP);
  sockaddr_in any = Sin("0.0.0.0", 0);
  RDS_EXPECT_ERRNO(SendTo(s.get(), std::string("x"), any, MSG_NOSIGNAL), EOPNOTSUPP);
}

TEST(Sendmsg, SendmsgWithMsgDontwaitIsAccepted) {
  Pair p = MakePair();
  ASSERT_TRUE(p.ok());
  RDS_EXPECT_RC(SendTo(p.s.get(), std::string("dw"), p.to, MSG_DONTWAIT), 2);
  EXPECT_EQ(RecvWithin(p.r.get()).data, "dw");
}

// ---- §A.4 step 2: msg_name ---------------------------------------------------------------------

TEST(Sendmsg, SendmsgWithNamelenBelow16GivesEinval) {
  Pair p = MakePair();
  ASSERT_TRUE(p.ok());
  RDS_EXPECT_ERRNO(SendMsg(p.s.get(), "x", 1, &p.to, 8), EINVAL);
  RDS_EXPECT_ERRNO(SendMsg(p.s.get(), "x", 1, &p.to, 15), EINVAL);
  ExpectNothingWithin(p.r.get(), 100);
}

TEST(Sendmsg, SendmsgToInaddrAnyGivesEinval) {
  Fd s = Bound4();
  ASSERT_TRUE(s.ok());
  RDS_EXPECT_ERRNO(SendTo(s.get(), std::string("x"), Sin("0.0.0.0", 5000)), EINVAL);
}

TEST(Sendmsg, SendmsgToBroadcastGivesEinval) {
  Fd s = Bound4();
  ASSERT_TRUE(s.ok());
  RDS_EXPECT_ERRNO(SendTo(s.get(), std::string("x"), Sin("255.255.255.255", 5000)), EINVAL);
}

TEST(Sendmsg, SendmsgToMulticastGivesEinval) {
  Fd s = Bound4();
  ASSERT_TRUE(s.ok());
  RDS_EXPECT_ERRNO(SendTo(s.get(), std::string("x"), Sin("224.0.0.1", 5000)), EINVAL);
}

TEST(Sendmsg, SendmsgIpv6WithNamelenBelow28GivesEinval) {
  Fd s = Bound6();
  ASSERT_TRUE(s.ok());
  sockaddr_in6 to = Lo6(5000);
  RDS_EXPECT_ERRNO(SendMsg(s.get(), "x", 1, &to, 24), EINVAL);
  RDS_EXPECT_ERRNO(SendMsg(s.get(), "x", 1, &to, 16), EINVAL);
}

TEST(Sendmsg, SendmsgToIpv6UnspecifiedGivesEinval) {
  Fd s = Bound6();
  ASSERT_TRUE(s.ok());
  RDS_EXPECT_ERRNO(SendTo(s.get(), std::string("x"), Sin6("::", 5000)), EINVAL);
}

TEST(Sendmsg, SendmsgToIpv6MulticastGivesEinval) {
  Fd s = Bound6();
  ASSERT_TRUE(s.ok());
  RDS_EXPECT_ERRNO(SendTo(s.get(), std::string("x"), Sin6("ff02::1", 5000)), EINVAL);
}

TEST(Sendmsg, SendmsgToIpv6V4MappedAnyGivesEinval) {
  Fd s = Bound4();
  ASSERT_TRUE(s.ok());
  RDS_EXPECT_ERRNO(SendTo(s.get(), std::string("x"), Sin6("::ffff:0.0.0.0", 5000)), EINVAL);
  RDS_EXPECT_ERRNO(SendTo(s.get(), std::string("x"), Sin6("::ffff:255.255.255.255", 5000)),
                   EINVAL);
  RDS_EXPECT_ERRNO(SendTo(s.get(), std::string("x"), Sin6("::ffff:224.0.0.1", 5000)), EINVAL);
}

TEST(Sendmsg, SendmsgToIpv6LinkLocalWithoutScopeGivesEinval) {
  Fd s = Bound6();
  ASSERT_TRUE(s.ok());
  RDS_EXPECT_ERRNO(SendTo(s.get(), std::string("x"), Sin6("fe80::1", 5000, 0)), EINVAL);
}

TEST(Sendmsg, SendmsgToOtherFamilyGivesEinval) {
  Fd s = Bound4();
  ASSERT_TRUE(s.ok());
  for (int fam : {AF_UNSPEC, AF_UNIX, AF_RDS}) {
    SCOPED_TRACE("family " + std::to_string(fam));
    sockaddr_in to = Lo4(5000);
    to.sin_family = static_cast<sa_family_t>(fam);
    RDS_EXPECT_ERRNO(SendTo(s.get(), std::string("x"), to), EINVAL);
  }
}

// Step 2 (name) comes before step 3 (bound): an unbound socket with a bad name gets EINVAL.
TEST(Sendmsg, SendmsgNameCheckComesBeforeTheBoundCheck) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  RDS_EXPECT_ERRNO(SendTo(s.get(), std::string("x"), Sin("0.0.0.0", 5000)), EINVAL);
}

// ---- §A.4 step 3: bound and destination -------------------------------------------------------

// "Not bound ... → ENOTCONN. There is no autobind."
TEST(Sendmsg, SendmsgUnboundGivesEnotconnAndDoesNotAutobind) {
  Fd r = Bound4();
  Fd s = RdsSocket();
  ASSERT_TRUE(r.ok() && s.ok());
  RDS_EXPECT_ERRNO(SendTo(s.get(), std::string("x"), Name4(r.get())), ENOTCONN);
  EXPECT_EQ(LocalName(s.get()).ss_family, AF_UNSPEC);
  ExpectNothingWithin(r.get(), 100);
}

TEST(Sendmsg, SendmsgConnectedButUnboundGivesEnotconn) {
  Fd r = Bound4();
  Fd s = RdsSocket();
  ASSERT_TRUE(r.ok() && s.ok());
  sockaddr_in to = Name4(r.get());
  RDS_ASSERT_RC(::connect(s.get(), SA(&to), sizeof to), 0);
  RDS_EXPECT_ERRNO(::send(s.get(), "x", 1, 0), ENOTCONN);
}

TEST(Sendmsg, SendmsgBoundUnconnectedWithoutNameGivesEnotconn) {
  Fd s = Bound4();
  ASSERT_TRUE(s.ok());
  RDS_EXPECT_ERRNO(::send(s.get(), "x", 1, 0), ENOTCONN);
  RDS_EXPECT_ERRNO(SendMsg(s.get(), "x", 1, nullptr, 0), ENOTCONN);
}

// ---- §A.4 step 4: address family of an explicit name ------------------------------------------

TEST(Sendmsg, SendmsgIpv4DestinationFromIpv6SocketGivesEopnotsupp) {
  Fd s6 = Bound6();
  Fd r4 = Bound4();
  ASSERT_TRUE(s6.ok() && r4.ok());
  RDS_EXPECT_ERRNO(SendTo(s6.get(), std::string("x"), Name4(r4.get())), EOPNOTSUPP);
  ExpectNothingWithin(r4.get(), 100);
}

TEST(Sendmsg, SendmsgIpv6DestinationFromIpv4SocketGivesEopnotsupp) {
  Fd s4 = Bound4();
  Fd r6 = Bound6();
  ASSERT_TRUE(s4.ok() && r6.ok());
  RDS_EXPECT_ERRNO(SendTo(s4.get(), std::string("x"), Name6(r6.get())), EOPNOTSUPP);
  ExpectNothingWithin(r6.get(), 100);
}

// A v4-mapped name is an IPv4 destination: wrong for an IPv6-bound socket...
TEST(Sendmsg, SendmsgV4MappedDestinationFromIpv6SocketGivesEopnotsupp) {
  Fd s6 = Bound6();
  Fd r4 = Bound4();
  ASSERT_TRUE(s6.ok() && r4.ok());
  sockaddr_in6 mapped = Sin6("::ffff:127.0.0.1", LocalPort(r4.get()));
  RDS_EXPECT_ERRNO(SendTo(s6.get(), std::string("x"), mapped), EOPNOTSUPP);
}

// ...and right for an IPv4-bound one.
TEST(Sendmsg, SendmsgV4MappedDestinationFromIpv4SocketIsDelivered) {
  Fd s4 = Bound4();
  Fd r4 = Bound4();
  ASSERT_TRUE(s4.ok() && r4.ok());
  sockaddr_in6 mapped = Sin6("::ffff:127.0.0.1", LocalPort(r4.get()));
  RDS_EXPECT_RC(SendTo(s4.get(), std::string("mapped"), mapped), 6);
  Received r = RecvWithin(r4.get());
  EXPECT_EQ(r.data, "mapped");
  EXPECT_EQ(r.from.ss_family, AF_INET);
  EXPECT_EQ(r.from_port(), LocalPort(s4.get()));
}

// ---- §A.4 steps 5 and 6: size limits ------------------------------------------------------------

// §A.4 step 6 / §E.14: the limit is the RDS sndbuf, i.e. the value the user set (getsockopt/2).
TEST(Sendmsg, SendLargerThanSndbufHalfGivesEmsgsize) {
  BindOpts o;
  o.sndbuf = 16384;
  Pair p = MakePair(o);
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(GetInt(p.s.get(), SOL_SOCKET, SO_SNDBUF), 32768);
  RDS_EXPECT_ERRNO(SendTo(p.s.get(), Payload(16385), p.to), EMSGSIZE);
  RDS_EXPECT_RC(SendTo(p.s.get(), Payload(16384), p.to), 16384);
  Received r = RecvWithin(p.r.get(), 20000);
  EXPECT_EQ(r.n, 16384);
  EXPECT_EQ(r.data, Payload(16384));
  ExpectNothingWithin(p.r.get(), 100);  // the rejected one never went out
}

// A send that fails after the size checks (here EFAULT from the payload copy, §A.4 step 8) queues
// nothing, so it takes no send-buffer space: ten of them in a row leave the whole RDS sndbuf
// for the next message (the shim reserves the space early and must give it back).
TEST(Sendmsg, FailedSendsTakeNoSendBufferSpace) {
  BindOpts o;
  o.sndbuf = 16384;
  Pair p = MakePair(o);
  ASSERT_TRUE(p.ok());
  for (int i = 0; i < 10; ++i) {
    RDS_EXPECT_ERRNO(SendTo(p.s.get(), reinterpret_cast<const void*>(16), 16000,
                            reinterpret_cast<const sockaddr*>(&p.to), sizeof p.to, MSG_DONTWAIT),
                     EFAULT);
  }
  RDS_EXPECT_RC(SendTo(p.s.get(), Payload(16384), p.to, MSG_DONTWAIT), 16384);
  Received r = RecvWithin(p.r.get(), 20000);
  EXPECT_EQ(r.n, 16384);
  ExpectNothingWithin(p.r.get(), 100);  // the failed ones never went out
}

// §A.4 step 6: "With the default sndbuf this limit is about 104 KiB, not 1 MiB."
TEST(Sendmsg, SendDefaultSndbufLimitsMessagesToHalfTheStoredValue) {
  Pair p = MakePair();
  ASSERT_TRUE(p.ok());
  int limit = RdsSndbuf(p.s.get());
  ASSERT_GT(limit, 0);
  ASSERT_LT(static_cast<size_t>(limit), kRdsMaxMsgSize) << "default wmem_default is huge";
  RDS_EXPECT_ERRNO(SendTo(p.s.get(), Payload(limit + 1), p.to), EMSGSIZE);
  RDS_EXPECT_RC(SendTo(p.s.get(), Payload(limit), p.to), limit);
  EXPECT_EQ(RecvWithin(p.r.get(), limit + 16).n, limit);
}

// The floor applies (SO_SNDBUF=1 stores SOCK_MIN_SNDBUF) and RDS uses half of it.
TEST(Sendmsg, SendLimitFollowsTheFlooredSndbuf) {
  BindOpts o;
  o.sndbuf = 1;
  Pair p = MakePair(o);
  ASSERT_TRUE(p.ok());
  int floor = KernelMinBuf(SO_SNDBUF);
  ASSERT_GT(floor, 0);
  ASSERT_EQ(GetInt(p.s.get(), SOL_SOCKET, SO_SNDBUF), floor);
  int limit = floor / 2;
  RDS_EXPECT_ERRNO(SendTo(p.s.get(), Payload(limit + 1), p.to), EMSGSIZE);
  RDS_EXPECT_RC(SendTo(p.s.get(), Payload(limit), p.to), limit);
}

// §A.4 step 5 / §E.14: above 1 MiB → EMSGSIZE even when the sndbuf would allow it.
TEST(Sendmsg, SendLargerThanOneMibGivesEmsgsizeEvenWithBigSndbuf) {
  Pair p = MakePair();
  ASSERT_TRUE(p.ok());
  if (!RaiseSndbuf(p.s.get(), 4 << 20))
    GTEST_SKIP() << "cannot raise the sndbuf above 1 MiB (wmem_max and no CAP_NET_ADMIN)";
  RDS_EXPECT_ERRNO(SendTo(p.s.get(), Payload(kRdsMaxMsgSize + 1), p.to), EMSGSIZE);
  RDS_EXPECT_ERRNO(SendTo(p.s.get(), Payload(2 * kRdsMaxMsgSize), p.to), EMSGSIZE);
  ExpectNothingWithin(p.r.get(), 100);
}

TEST(Sendmsg, SendOfExactlyOneMibIsAllowedWithBigSndbuf) {
  Pair p = MakePair();
  ASSERT_TRUE(p.ok());
  if (!RaiseSndbuf(p.s.get(), 4 << 20))
    GTEST_SKIP() << "cannot raise the sndbuf above 1 MiB (wmem_max and no CAP_NET_ADMIN)";
  std::string big = Payload(kRdsMaxMsgSize, 5);
  RDS_EXPECT_RC(SendTo(p.s.get(), big, p.to), kRdsMaxMsgSize);
  Received r = RecvWithin(p.r.get(), kRdsMaxMsgSize + 16, 5000);
  ASSERT_EQ(r.n, static_cast<ssize_t>(kRdsMaxMsgSize)) << ErrnoName(r.err);
  EXPECT_TRUE(r.data == big) << "1 MiB payload corrupted";
  EXPECT_EQ(r.msg_flags & MSG_TRUNC, 0);
}

// Ordering: ENOTCONN (step 3) before EMSGSIZE (step 5).
TEST(Sendmsg, SendmsgEnotconnComesBeforeEmsgsize) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  RDS_EXPECT_ERRNO(SendTo(s.get(), Payload(2 * kRdsMaxMsgSize), Lo4(5000)), ENOTCONN);
}

// Ordering: EOPNOTSUPP for the family (step 4) before EMSGSIZE (step 5).
TEST(Sendmsg, SendmsgFamilyMismatchComesBeforeEmsgsize) {
  Fd s6 = Bound6();
  ASSERT_TRUE(s6.ok());
  RDS_EXPECT_ERRNO(SendTo(s6.get(), Payload(2 * kRdsMaxMsgSize), Lo4(5000)), EOPNOTSUPP);
}

// Ordering: EMSGSIZE (steps 5/6) before cmsg parsing (step 7).
TEST(Sendmsg, SendmsgEmsgsizeComesBeforeCmsgParsing) {
  BindOpts o;
  o.sndbuf = 16384;
  Pair p = MakePair(o);
  ASSERT_TRUE(p.ok());
  Cmsgs c;
  c.Add(SOL_RDS, 100, uint64_t{0});
  std::string big = Payload(16385);
  RDS_EXPECT_ERRNO(SendMsg(p.s.get(), big.data(), big.size(), &p.to, sizeof p.to, 0, c.data(),
                           c.size()),
                   EMSGSIZE);
}

// ---- §A.4 step 7: control messages -----------------------------------------------------------

TEST(Sendmsg, SendmsgWithUnknownSolRdsCmsgGivesEinval) {
  Pair p = MakePair();
  ASSERT_TRUE(p.ok());
  Cmsgs c;
  c.Add(SOL_RDS, 100, uint64_t{0});
  RDS_EXPECT_ERRNO(SendMsg(p.s.get(), "x", 1, &p.to, sizeof p.to, 0, c.data(), c.size()), EINVAL);
  ExpectNothingWithin(p.r.get(), 100);
}

// RDS_CMSG_CONG_UPDATE / RDMA_STATUS are receive-side types: unknown to sendmsg → EINVAL.
TEST(Sendmsg, SendmsgWithReceiveOnlyCmsgTypeGivesEinval) {
  Pair p = MakePair();
  ASSERT_TRUE(p.ok());
  Cmsgs c;
  c.Add(SOL_RDS, RDS_CMSG_CONG_UPDATE, uint64_t{1});
  RDS_EXPECT_ERRNO(SendMsg(p.s.get(), "x", 1, &p.to, sizeof p.to, 0, c.data(), c.size()), EINVAL);
}

// "cmsgs at levels other than SOL_RDS are ignored."
TEST(Sendmsg, SendmsgIgnoresCmsgsAtOtherLevels) {
  Pair p = MakePair();
  ASSERT_TRUE(p.ok());
  Cmsgs c;
  c.Add(IPPROTO_IP, IP_TOS, int{0x10});
  c.Add(IPPROTO_TCP, 12345, uint64_t{42});
  RDS_EXPECT_RC(SendMsg(p.s.get(), "cm", 2, &p.to, sizeof p.to, 0, c.data(), c.size()), 2);
  EXPECT_EQ(RecvWithin(p.r.get()).data, "cm");
}

// An RDMA_ARGS cmsg shorter than struct rds_rdma_args → EINVAL (rds_rdma_bytes, 6.12).
TEST(Sendmsg, SendmsgWithShortRdmaArgsCmsgGivesEinval) {
  Pair p = MakePair();
  ASSERT_TRUE(p.ok());
  Cmsgs c;
  c.Add(SOL_RDS, RDS_CMSG_RDMA_ARGS, uint64_t{0});
  RDS_EXPECT_ERRNO(SendMsg(p.s.get(), "x", 1, &p.to, sizeof p.to, 0, c.data(), c.size()), EINVAL);
}

// Step 5: "the RDMA byte count from RDS_CMSG_RDMA_ARGS is larger than 1 MiB → EMSGSIZE".
TEST(Sendmsg, SendmsgRdmaArgsOverOneMibGivesEmsgsize) {
  Pair p = MakePair();
  ASSERT_TRUE(p.ok());
  Cmsgs c;
  c.Add(SOL_RDS, RDS_CMSG_RDMA_ARGS, WellFormedRdmaArgs(kRdsMaxMsgSize + 1));
  RDS_EXPECT_ERRNO(SendMsg(p.s.get(), "x", 1, &p.to, sizeof p.to, 0, c.data(), c.size()),
                   EMSGSIZE);
}

// Step 7: mixing the (RDMA_DEST, RDMA_MAP) group with the (RDMA_ARGS, atomic) group → EINVAL,
// before the transport is asked (which would say EOPNOTSUPP).
TEST(Sendmsg, SendmsgMixingRdmaDestAndRdmaArgsGivesEinval) {
  Pair p = MakePair();
  ASSERT_TRUE(p.ok());
  Cmsgs c;
  c.Add(SOL_RDS, RDS_CMSG_RDMA_ARGS, WellFormedRdmaArgs(sizeof g_rdma_local));
  c.Add(SOL_RDS, RDS_CMSG_RDMA_DEST, uint64_t{0x1234});
  RDS_EXPECT_ERRNO(SendMsg(p.s.get(), "x", 1, &p.to, sizeof p.to, 0, c.data(), c.size()), EINVAL);
}

// Step 7: a well-formed RDMA op on a loopback/TCP socket: the transport has no xmit_rdma →
// EOPNOTSUPP (§A.4 allows "or an earlier EINVAL/ENOTCONN from rdma.c"; with a bound socket
// and valid, pinnable local memory rds_cmsg_rdma_args succeeds, so EOPNOTSUPP is what 6.12
// returns).
TEST(Sendmsg, SendmsgRdmaArgsOnLoopbackGivesEopnotsupp) {
  Pair p = MakePair();
  ASSERT_TRUE(p.ok());
  Cmsgs c;
  c.Add(SOL_RDS, RDS_CMSG_RDMA_ARGS, WellFormedRdmaArgs(sizeof g_rdma_local));
  RDS_EXPECT_ERRNO(SendMsg(p.s.get(), "x", 1, &p.to, sizeof p.to, 0, c.data(), c.size()),
                   EOPNOTSUPP);
  ExpectNothingWithin(p.r.get(), 100);
}

// Same for atomics: no xmit_atomic → EOPNOTSUPP.
TEST(Sendmsg, SendmsgAtomicFaddOnLoopbackGivesEopnotsupp) {
  Pair p = MakePair();
  ASSERT_TRUE(p.ok());
  rds_atomic_args a{};
  a.cookie = 0x0000000100000001ull;
  a.local_addr = reinterpret_cast<uint64_t>(&g_atomic_local);
  a.remote_addr = 0;
  a.fadd.add = 1;
  Cmsgs c;
  c.Add(SOL_RDS, RDS_CMSG_ATOMIC_FADD, a);
  RDS_EXPECT_ERRNO(SendMsg(p.s.get(), "x", 1, &p.to, sizeof p.to, 0, c.data(), c.size()),
                   EOPNOTSUPP);
}

// Step 7: "MSG_ZEROCOPY without an RDS_CMSG_ZCOPY_COOKIE cmsg → EINVAL" (rds_rm_size checks the
// flag whether or not SO_ZEROCOPY is set).
TEST(Sendmsg, SendmsgWithMsgZerocopyWithoutCookieGivesEinval) {
  Pair p = MakePair();
  ASSERT_TRUE(p.ok());
  RDS_EXPECT_ERRNO(SendTo(p.s.get(), std::string("z"), p.to, MSG_ZEROCOPY), EINVAL);
}

// Step 7: "MSG_ZEROCOPY on a non-TCP transport → EOPNOTSUPP" (when SO_ZEROCOPY is on).
TEST(Sendmsg, SendmsgWithMsgZerocopyOnLoopbackTransportGivesEopnotsupp) {
  Pair p = MakePair();
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(SetInt(p.s.get(), SOL_SOCKET, SO_ZEROCOPY, 1));
  Cmsgs c;
  c.Add(SOL_RDS, RDS_CMSG_ZCOPY_COOKIE, uint32_t{77});
  RDS_EXPECT_ERRNO(SendMsg(p.s.get(), "z", 1, &p.to, sizeof p.to, MSG_ZEROCOPY, c.data(),
                           c.size()),
                   EOPNOTSUPP);
}

// Step 7: an RDS_CMSG_ZCOPY_COOKIE is only valid on a zerocopy send (rds_cmsg_zcopy needs the
// zerocopy notifier, which exists only with MSG_ZEROCOPY on an SO_ZEROCOPY socket) → EINVAL.
TEST(Sendmsg, SendmsgZcopyCookieWithoutSoZerocopyGivesEinval) {
  Pair p = MakePair();
  ASSERT_TRUE(p.ok());
  Cmsgs c;
  c.Add(SOL_RDS, RDS_CMSG_ZCOPY_COOKIE, uint32_t{5});
  RDS_EXPECT_ERRNO(SendMsg(p.s.get(), "z", 1, &p.to, sizeof p.to, MSG_ZEROCOPY, c.data(),
                           c.size()),
                   EINVAL);
  ExpectNothingWithin(p.r.get(), 100);
}

TEST(Sendmsg, SendmsgZcopyCookieWithoutMsgZerocopyGivesEinval) {
  Pair p = MakePair();
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(SetInt(p.s.get(), SOL_SOCKET, SO_ZEROCOPY, 1));
  Cmsgs c;
  c.Add(SOL_RDS, RDS_CMSG_ZCOPY_COOKIE, uint32_t{5});
  RDS_EXPECT_ERRNO(SendMsg(p.s.get(), "z", 1, &p.to, sizeof p.to, 0, c.data(), c.size()), EINVAL);
}

// Step 7: on the TCP transport with SO_ZEROCOPY, MSG_ZEROCOPY plus a cookie is honoured: the
// send succeeds and the payload arrives intact.
TEST(Sendmsg, SendmsgWithMsgZerocopyOnTcpTransportIsDelivered) {
  Fd s, r;
  ASSERT_NO_FATAL_FAILURE(MakeZerocopyCompletionPending(&s, &r, 42));
}

// ---- §A.4 step 12: the return value and what is delivered ---------------------------------------

TEST(Sendmsg, SendReturnsThePayloadLength) {
  Pair p = MakePair();
  ASSERT_TRUE(p.ok());
  std::string m = Payload(1000);
  RDS_EXPECT_RC(SendTo(p.s.get(), m, p.to), 1000);
  Received r = RecvWithin(p.r.get());
  EXPECT_EQ(r.n, 1000);
  EXPECT_EQ(r.data, m);
}

// §A.4 step 12 / §E.14: zero-length messages are legal and return 0.
TEST(Sendmsg, SendZeroLengthReturnsZeroAndDeliversAnEmptyMessage) {
  Pair p = MakePair();
  ASSERT_TRUE(p.ok());
  RDS_EXPECT_RC(SendTo(p.s.get(), std::string(), p.to), 0);
  RDS_EXPECT_RC(SendMsg(p.s.get(), nullptr, 0, &p.to, sizeof p.to), 0);
  for (int i = 0; i < 2; ++i) {
    Received r = RecvWithin(p.r.get());
    EXPECT_EQ(r.n, 0) << ErrnoName(r.err);
    EXPECT_EQ(r.fromlen, sizeof(sockaddr_in));
    EXPECT_EQ(r.from_port(), LocalPort(p.s.get()));
    EXPECT_EQ(r.msg_flags & MSG_TRUNC, 0);
  }
}

TEST(Sendmsg, SendmsgGathersAllIovecsIntoOneMessage) {
  Pair p = MakePair();
  ASSERT_TRUE(p.ok());
  char a[] = "abc", b[] = "", c[] = "defgh";
  iovec iov[3] = {{a, 3}, {b, 0}, {c, 5}};
  msghdr m{};
  m.msg_name = &p.to;
  m.msg_namelen = sizeof p.to;
  m.msg_iov = iov;
  m.msg_iovlen = 3;
  RDS_EXPECT_RC(::sendmsg(p.s.get(), &m, 0), 8);
  Received r = RecvWithin(p.r.get());
  EXPECT_EQ(r.n, 8);
  EXPECT_EQ(r.data, "abcdefgh");
  ExpectNothingWithin(p.r.get(), 100);
}

TEST(Sendmsg, SendToOwnAddressIsDelivered) {
  Fd s = Bound4();
  ASSERT_TRUE(s.ok());
  RDS_EXPECT_RC(SendTo(s.get(), std::string("self"), Name4(s.get())), 4);
  Received r = RecvWithin(s.get());
  EXPECT_EQ(r.data, "self");
  EXPECT_EQ(r.from_port(), LocalPort(s.get()));
}

TEST(Sendmsg, SendToAnotherLoopbackAddressIsDeliveredWithTheSourceAddress) {
  Fd s = Bound4("127.0.0.1");
  Fd r = Bound4("127.0.0.2");
  ASSERT_TRUE(s.ok() && r.ok());
  RDS_EXPECT_RC(SendTo(s.get(), std::string("x2"), Name4(r.get())), 2);
  Received m = RecvWithin(r.get());
  EXPECT_EQ(m.data, "x2");
  EXPECT_EQ(m.from4().sin_addr.s_addr, htonl(INADDR_LOOPBACK));
}

// Messages to a port nobody bound are dropped silently; the send succeeds (§C.8 / B: the
// receiver drops it as for an unbound port; sendmsg never reports delivery failures, step 9).
TEST(Sendmsg, SendToUnboundPortSucceedsAndIsSilentlyDropped) {
  Pair p = MakePair();
  ASSERT_TRUE(p.ok());
  uint16_t nobody = UnusedPort4();
  ASSERT_GE(nobody, 2);
  RDS_EXPECT_RC(SendTo(p.s.get(), std::string("lost"), Lo4(nobody)), 4);
  ExpectNothingWithin(p.s.get(), 200);  // no error report, no bounce
  // The path keeps working.
  RDS_EXPECT_RC(SendTo(p.s.get(), std::string("ok"), p.to), 2);
  EXPECT_EQ(RecvWithin(p.r.get()).data, "ok");
}

// A message sent to a socket that has since been closed is dropped the same way.
TEST(Sendmsg, SendToAClosedSocketsPortSucceeds) {
  Fd s = Bound4();
  ASSERT_TRUE(s.ok());
  sockaddr_in to;
  {
    Fd gone = Bound4();
    ASSERT_TRUE(gone.ok());
    to = Name4(gone.get());
  }
  RDS_EXPECT_RC(SendTo(s.get(), std::string("late"), to), 4);
  ExpectNothingWithin(s.get(), 200);
}

// §C.8 ping (ping_enable defaults to 1, §A.11): a message to port 0 is answered by an empty
// message from port 0 of that address, though nobody bound anything for it.
TEST(Sendmsg, SendToPortZeroIsAnsweredByAnEmptyMessageFromPortZero) {
  Fd s = Bound4();
  ASSERT_TRUE(s.ok());
  RDS_EXPECT_RC(SendTo(s.get(), std::string(), Lo4(0)), 0);
  Received r = RecvWithin(s.get());
  ASSERT_EQ(r.n, 0) << ErrnoName(r.err);
  EXPECT_EQ(r.fromlen, sizeof(sockaddr_in));
  EXPECT_EQ(r.from.ss_family, AF_INET);
  EXPECT_EQ(r.from4().sin_port, 0);
  EXPECT_EQ(r.from4().sin_addr.s_addr, htonl(INADDR_LOOPBACK));
  ExpectNothingWithin(s.get(), 100);  // exactly one pong
}

// The pong is zero-length whatever the ping carried.
TEST(Sendmsg, NonEmptyPingIsAnsweredByAnEmptyPong) {
  Fd s = Bound4();
  ASSERT_TRUE(s.ok());
  RDS_EXPECT_RC(SendTo(s.get(), std::string("ping!"), Lo4(0)), 5);
  Received r = RecvWithin(s.get());
  ASSERT_EQ(r.n, 0) << ErrnoName(r.err);
  EXPECT_EQ(r.from_port(), 0);
  EXPECT_EQ(r.msg_flags & MSG_TRUNC, 0);
}

TEST(Sendmsg, SendToIpv6PortZeroIsAnsweredFromPortZero) {
  Fd s = Bound6();
  ASSERT_TRUE(s.ok());
  RDS_EXPECT_RC(SendTo(s.get(), std::string(), Lo6(0)), 0);
  Received r = RecvWithin(s.get());
  ASSERT_EQ(r.n, 0) << ErrnoName(r.err);
  EXPECT_EQ(r.from.ss_family, AF_INET6);
  EXPECT_EQ(r.fromlen, sizeof(sockaddr_in6));
  EXPECT_EQ(r.from6().sin6_port, 0);
  EXPECT_TRUE(IN6_IS_ADDR_LOOPBACK(&r.from6().sin6_addr));
}

// Connected to port 0 works the same (connect just records the destination).
TEST(Sendmsg, SendOnSocketConnectedToPortZeroIsAPing) {
  Fd s = Bound4();
  ASSERT_TRUE(s.ok());
  sockaddr_in zero = Lo4(0);
  RDS_ASSERT_RC(::connect(s.get(), SA(&zero), sizeof zero), 0);
  RDS_EXPECT_RC(::send(s.get(), "", 0, 0), 0);
  Received r = RecvWithin(s.get());
  EXPECT_EQ(r.n, 0);
  EXPECT_EQ(r.from_port(), 0);
}

// Ordering is per (sending socket → destination) (§C.9).
TEST(Sendmsg, MessagesFromOneSenderArriveInOrder) {
  Pair p = MakePair();
  ASSERT_TRUE(p.ok());
  constexpr int kN = 200;
  for (int i = 0; i < kN; ++i) {
    std::string m = std::to_string(i) + ":" + std::string(static_cast<size_t>(i % 37), 'o');
    ASSERT_EQ(SendTo(p.s.get(), m, p.to), static_cast<ssize_t>(m.size())) << ErrnoName(errno);
  }
  for (int i = 0; i < kN; ++i) {
    Received r = RecvWithin(p.r.get());
    ASSERT_GE(r.n, 0) << "message " << i << " missing: " << ErrnoName(r.err);
    EXPECT_EQ(r.data, std::to_string(i) + ":" + std::string(static_cast<size_t>(i % 37), 'o'));
  }
}

// write() on a SOCK_SEQPACKET socket carries MSG_EOR (net/socket.c, sock_write_iter), which
// rds_sendmsg refuses (§A.4 step 1): write() and writev() on an RDS socket give EOPNOTSUPP
// even when connected. (Established from kernel source; the reference does not list write.)
TEST(Sendmsg, WriteGivesEopnotsuppBecauseSeqpacketWritesCarryMsgEor) {
  Pair p = MakePair();
  ASSERT_TRUE(p.ok());
  RDS_ASSERT_RC(::connect(p.s.get(), SA(&p.to), sizeof p.to), 0);
  RDS_EXPECT_ERRNO(::write(p.s.get(), "w", 1), EOPNOTSUPP);
  char b[] = "v";
  iovec iov{b, 1};
  RDS_EXPECT_ERRNO(::writev(p.s.get(), &iov, 1), EOPNOTSUPP);
  ExpectNothingWithin(p.r.get(), 100);
}

// ---- §B.2 / §B.4: congestion seen by a sender ------------------------------------------------

// §B.2: "Sockets on the loopback transport never mark congestion" and "The receiver never drops
// data because of rcvbuf."
TEST(Sendmsg, LoopbackReceiverNeverCausesEnobufsAndNeverDrops) {
  BindOpts ro;
  ro.rcvbuf = 4096;
  Pair p = MakePair({}, ro);
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(RdsRcvbuf(p.r.get()), 4096);
  constexpr int kN = 12;  // 12 KiB queued on a 4 KiB rcvbuf
  for (int i = 0; i < kN; ++i) {
    RDS_ASSERT_RC(SendTo(p.s.get(), Payload(1024, i), p.to, MSG_DONTWAIT), 1024);
    SleepMs(10);
  }
  for (int i = 0; i < kN; ++i) {
    Received r = RecvWithin(p.r.get());
    ASSERT_EQ(r.n, 1024) << "message " << i << ": " << ErrnoName(r.err);
    EXPECT_EQ(r.data, Payload(1024, i));
  }
}

// §B.2: congested only when the queued bytes go strictly above rcvbuf; then a non-blocking send
// to that port gives ENOBUFS (§A.4 step 10, §B.4).
TEST(Sendmsg, SendToCongestedPortNonblockingGivesEnobufs) {
  Fd s = TcpTransportSender();
  Fd r = TcpTransportReceiver(4096);
  ASSERT_TRUE(s.ok() && r.ok());
  sockaddr_in to = Name4(r.get());
  std::string k = Payload(1024, 3);
  for (int i = 0; i < 4; ++i) RDS_ASSERT_RC(SendTo(s.get(), k, to, MSG_DONTWAIT), 1024);
  SleepMs(kSettleMs);
  // Exactly rcvbuf queued: not congested yet.
  RDS_EXPECT_RC(SendTo(s.get(), std::string("x"), to, MSG_DONTWAIT), 1);
  SleepMs(kSettleMs);
  // rcvbuf + 1 queued: congested.
  RDS_EXPECT_ERRNO(SendTo(s.get(), std::string("y"), to, MSG_DONTWAIT), ENOBUFS);
}

// O_NONBLOCK is folded into the flags (§A.4 step 10): same ENOBUFS without MSG_DONTWAIT.
TEST(Sendmsg, SendToCongestedPortOnNonblockingFdGivesEnobufs) {
  Fd s = TcpTransportSender();
  Fd r = TcpTransportReceiver(4096);
  ASSERT_TRUE(s.ok() && r.ok());
  ASSERT_TRUE(Congest(s.get(), r.get(), 4096));
  ASSERT_EQ(fcntl(s.get(), F_SETFL, fcntl(s.get(), F_GETFL) | O_NONBLOCK), 0);
  RDS_EXPECT_ERRNO(SendTo(s.get(), std::string("y"), Name4(r.get())), ENOBUFS);
}

// Congestion is per destination port: other ports of the same address still accept.
TEST(Sendmsg, CongestionOfOnePortDoesNotAffectAnother) {
  Fd s = TcpTransportSender();
  Fd r = TcpTransportReceiver(4096);
  Fd other = TcpTransportReceiver(4096);
  ASSERT_TRUE(s.ok() && r.ok() && other.ok());
  ASSERT_TRUE(Congest(s.get(), r.get(), 4096));
  RDS_EXPECT_ERRNO(SendTo(s.get(), std::string("y"), Name4(r.get()), MSG_DONTWAIT), ENOBUFS);
  RDS_EXPECT_RC(SendTo(s.get(), std::string("z"), Name4(other.get()), MSG_DONTWAIT), 1);
  EXPECT_EQ(RecvWithin(other.get()).data, "z");
}

// §B.2 hysteresis: uncongested only when the queued bytes drop below half of rcvbuf.
TEST(Sendmsg, CongestedPortStaysCongestedUntilBelowHalfOfRcvbuf) {
  Fd s = TcpTransportSender();
  Fd r = TcpTransportReceiver(4096);
  ASSERT_TRUE(s.ok() && r.ok());
  sockaddr_in to = Name4(r.get());
  ASSERT_TRUE(Congest(s.get(), r.get(), 4096));  // 4 x 1024 + 1 = 4097 queued
  ASSERT_EQ(RecvWithin(r.get()).n, 1024);        // 3073 queued
  SleepMs(kSettleMs);
  RDS_EXPECT_ERRNO(SendTo(s.get(), std::string("y"), to, MSG_DONTWAIT), ENOBUFS);
  ASSERT_EQ(RecvWithin(r.get()).n, 1024);  // 2049 queued: still not below 2048
  SleepMs(kSettleMs);
  RDS_EXPECT_ERRNO(SendTo(s.get(), std::string("y"), to, MSG_DONTWAIT), ENOBUFS);
  ASSERT_EQ(RecvWithin(r.get()).n, 1024);  // 1025 queued: below half
  SleepMs(kSettleMs);
  RDS_EXPECT_RC(SendTo(s.get(), std::string("z"), to, MSG_DONTWAIT), 1);
}

// §B.2: "The receiver never drops data because of rcvbuf" — everything queued before and at the
// congestion point is delivered, in order.
TEST(Sendmsg, CongestedReceiverKeepsEveryQueuedMessage) {
  Fd s = TcpTransportSender();
  Fd r = TcpTransportReceiver(4096);
  ASSERT_TRUE(s.ok() && r.ok());
  ASSERT_TRUE(Congest(s.get(), r.get(), 4096));
  for (int i = 0; i < 4; ++i) {
    Received m = RecvWithin(r.get());
    EXPECT_EQ(m.n, 1024) << ErrnoName(m.err);
    EXPECT_EQ(m.data, Payload(1024, 3));
  }
  EXPECT_EQ(RecvWithin(r.get()).data, "x");
}

// §A.4 step 10 / §B.4 / §E.14: a blocking send to a congested port sleeps with no timeout —
// SO_SNDTIMEO is ignored — until the port is uncongested.
TEST(Sendmsg, BlockingSendToCongestedPortIgnoresSndtimeo) {
  Fd s = TcpTransportSender();
  Fd r = TcpTransportReceiver(4096);
  ASSERT_TRUE(s.ok() && r.ok());
  ASSERT_TRUE(SetTimeoutMs(s.get(), SO_SNDTIMEO, 100));
  ASSERT_TRUE(Congest(s.get(), r.get(), 4096));
  sockaddr_in to = Name4(r.get());
  int sfd = s.get();
  AsyncCall call([sfd, to] { return static_cast<long>(SendTo(sfd, std::string("late"), to)); });
  EXPECT_FALSE(call.WaitFor(800)) << "returned " << call.rc() << " / " << ErrnoName(call.err())
                                  << ": SO_SNDTIMEO must not apply to congestion";
  // Uncongest: read until below half.
  for (int i = 0; i < 3; ++i) ASSERT_EQ(RecvWithin(r.get()).n, 1024);
  if (!call.WaitFor(kPromptMs)) {
    ADD_FAILURE() << "blocked sender not woken by uncongestion";
    r.reset();  // closing clears the congestion bit (§A.10 step 3)
    ASSERT_TRUE(call.WaitFor(kPromptMs));
  }
  EXPECT_EQ(call.rc(), 4) << ErrnoName(call.err());
}

// §A.4 step 10: the congestion sleep is interruptible: a signal without SA_RESTART → EINTR.
TEST(Sendmsg, BlockingSendToCongestedPortGivesEintrOnSignalWithoutSaRestart) {
  RDS_SKIP_UNDER_TSAN("signal delivery");
  Fd s = TcpTransportSender();
  Fd r = TcpTransportReceiver(4096);
  ASSERT_TRUE(s.ok() && r.ok());
  ASSERT_TRUE(Congest(s.get(), r.get(), 4096));
  ScopedSignalHandler h(SIGUSR1, /*restart=*/false);
  sockaddr_in to = Name4(r.get());
  int sfd = s.get();
  AsyncCall call([sfd, to] { return static_cast<long>(SendTo(sfd, std::string("sig"), to)); });
  LetItBlock();
  ASSERT_FALSE(call.done()) << "send did not block on a congested port";
  pthread_kill(call.handle(), SIGUSR1);
  if (!call.WaitFor(kPromptMs)) {
    ADD_FAILURE() << "signal did not interrupt the congestion wait";
    r.reset();
    ASSERT_TRUE(call.WaitFor(kPromptMs));
  }
  EXPECT_EQ(call.rc(), -1);
  EXPECT_EQ(call.err(), EINTR) << ErrnoName(call.err());
  EXPECT_EQ(ScopedSignalHandler::count().load(), 1);
}

// ---- §A.4 step 11: the send buffer ---------------------------------------------------------------
// These need a destination that does not drain; see StoppedPeer in rds_test_util.h.

constexpr int kSmallSndbuf = 32768;  // RDS sndbuf for the fill tests
constexpr size_t kFillMsg = 4096;

Fd FillSender() {
  BindOpts o;
  o.sndbuf = kSmallSndbuf;
  Fd s = Bound4("127.0.0.1", 0, o);
  if (s.ok() && RdsSndbuf(s.get()) != kSmallSndbuf) {
    ADD_FAILURE() << "RDS sndbuf is " << RdsSndbuf(s.get());
    return Fd();
  }
  return s;
}

// "Not admitted and non-blocking → EAGAIN."
TEST(Sendmsg, SendWithFullSndbufAndMsgDontwaitGivesEagain) {
  RDS_SKIP_UNDER_TSAN("fork of a multi-threaded process");
  StoppedPeer peer;
  ASSERT_TRUE(peer.Start());
  Fd s = FillSender();
  ASSERT_TRUE(s.ok());
  RDS_FILL_OR_SKIP(s.get(), peer.addr(), kFillMsg, nullptr);
  RDS_EXPECT_ERRNO(SendTo(s.get(), std::string("x"), peer.addr(), MSG_DONTWAIT), EAGAIN);
  // Zero-length messages are admitted by the same rule.
  RDS_EXPECT_ERRNO(SendTo(s.get(), std::string(), peer.addr(), MSG_DONTWAIT), EAGAIN);
}

TEST(Sendmsg, SendWithFullSndbufOnNonblockingFdGivesEagain) {
  RDS_SKIP_UNDER_TSAN("fork of a multi-threaded process");
  StoppedPeer peer;
  ASSERT_TRUE(peer.Start());
  Fd s = FillSender();
  ASSERT_TRUE(s.ok());
  RDS_FILL_OR_SKIP(s.get(), peer.addr(), kFillMsg, nullptr);
  ASSERT_EQ(fcntl(s.get(), F_SETFL, fcntl(s.get(), F_GETFL) | O_NONBLOCK), 0);
  RDS_EXPECT_ERRNO(SendTo(s.get(), std::string("x"), peer.addr()), EAGAIN);
}

// "Not admitted and blocking → waits up to SO_SNDTIMEO. Expiry → ETIMEDOUT (not EAGAIN)."
TEST(Sendmsg, SendWithFullSndbufAndSndtimeoGivesEtimedout) {
  RDS_SKIP_UNDER_TSAN("fork of a multi-threaded process");
  StoppedPeer peer;
  ASSERT_TRUE(peer.Start());
  Fd s = FillSender();
  ASSERT_TRUE(s.ok());
  RDS_FILL_OR_SKIP(s.get(), peer.addr(), kFillMsg, nullptr);
  ASSERT_TRUE(SetTimeoutMs(s.get(), SO_SNDTIMEO, 300));
  int sfd = s.get();
  sockaddr_in to = peer.addr();
  auto t0 = Clock::now();
  AsyncCall call([sfd, to] { return static_cast<long>(SendTo(sfd, std::string("t"), to)); });
  if (!call.WaitFor(5000)) {
    ADD_FAILURE() << "SO_SNDTIMEO did not expire";
    CancelSentTo(sfd, to);  // frees the buffer, which admits the blocked message
    ASSERT_TRUE(call.WaitFor(kPromptMs));
  }
  long ms = ElapsedMs(t0);
  EXPECT_EQ(call.rc(), -1);
  EXPECT_EQ(call.err(), ETIMEDOUT) << ErrnoName(call.err());
  EXPECT_GE(ms, 250);
  EXPECT_LT(ms, 3000);
}

// "A signal → ERESTARTSYS/EINTR": without SA_RESTART the blocked send fails with EINTR.
TEST(Sendmsg, SendBlockedOnFullSndbufGivesEintrOnSignalWithoutSaRestart) {
  RDS_SKIP_UNDER_TSAN("fork of a multi-threaded process");
  StoppedPeer peer;
  ASSERT_TRUE(peer.Start());
  Fd s = FillSender();
  ASSERT_TRUE(s.ok());
  RDS_FILL_OR_SKIP(s.get(), peer.addr(), kFillMsg, nullptr);
  ScopedSignalHandler h(SIGUSR1, /*restart=*/false);
  int sfd = s.get();
  sockaddr_in to = peer.addr();
  AsyncCall call([sfd, to] { return static_cast<long>(SendTo(sfd, std::string("i"), to)); });
  LetItBlock();
  ASSERT_FALSE(call.done()) << "send on a full buffer did not block: rc " << call.rc() << " "
                            << ErrnoName(call.err());
  pthread_kill(call.handle(), SIGUSR1);
  if (!call.WaitFor(kPromptMs)) {
    ADD_FAILURE() << "signal did not interrupt the blocked send";
    CancelSentTo(sfd, to);
    ASSERT_TRUE(call.WaitFor(kPromptMs));
  }
  EXPECT_EQ(call.rc(), -1);
  EXPECT_EQ(call.err(), EINTR) << ErrnoName(call.err());
}

// ERESTARTSYS with SA_RESTART restarts the send; it then completes as soon as space is freed
// (here by RDS_CANCEL_SENT_TO, which wakes the socket, §A.7).
TEST(Sendmsg, SendBlockedOnFullSndbufIsRestartedAfterSaRestartSignal) {
  RDS_SKIP_UNDER_TSAN("fork of a multi-threaded process");
  StoppedPeer peer;
  ASSERT_TRUE(peer.Start());
  Fd s = FillSender();
  ASSERT_TRUE(s.ok());
  RDS_FILL_OR_SKIP(s.get(), peer.addr(), kFillMsg, nullptr);
  ScopedSignalHandler h(SIGUSR1, /*restart=*/true);
  int sfd = s.get();
  sockaddr_in to = peer.addr();
  AsyncCall call([sfd, to] { return static_cast<long>(SendTo(sfd, std::string("rs"), to)); });
  LetItBlock();
  ASSERT_FALSE(call.done());
  pthread_kill(call.handle(), SIGUSR1);
  EXPECT_FALSE(call.WaitFor(500)) << "returned " << call.rc() << " / " << ErrnoName(call.err());
  EXPECT_EQ(ScopedSignalHandler::count().load(), 1);
  RDS_EXPECT_RC(CancelSentTo(sfd, to), 0);
  ASSERT_TRUE(call.WaitFor(kPromptMs)) << "cancel did not make room for the blocked send";
  EXPECT_EQ(call.rc(), 2) << ErrnoName(call.err());
}

// §A.4 step 11 / §E.14: admission compares the bytes queued *before* this message with sndbuf,
// so a message is admitted while anything below sndbuf is queued, even if it overshoots.
TEST(Sendmsg, SendSndbufCheckUsesTheQueuedBytesBeforeTheMessage) {
  RDS_SKIP_UNDER_TSAN("fork of a multi-threaded process");
  StoppedPeer peer;
  ASSERT_TRUE(peer.Start());
  Fd s = FillSender();
  ASSERT_TRUE(s.ok());
  RDS_FILL_OR_SKIP(s.get(), peer.addr(), kFillMsg, nullptr);
  // Drop what is queued (the link to the stopped peer stays full), then queue one byte: now
  // 0 < queued <= kFillMsg + 1 < sndbuf, with nothing able to drain.
  RDS_ASSERT_RC(CancelSentTo(s.get(), peer.addr()), 0);
  RDS_ASSERT_RC(SendTo(s.get(), std::string("1"), peer.addr(), MSG_DONTWAIT), 1);
  // A full-sndbuf message still fits the pre-add rule (queued < sndbuf)...
  RDS_EXPECT_RC(SendTo(s.get(), Payload(kSmallSndbuf), peer.addr(), MSG_DONTWAIT), kSmallSndbuf);
  // ...and now the buffer is over the limit.
  RDS_EXPECT_ERRNO(SendTo(s.get(), std::string("2"), peer.addr(), MSG_DONTWAIT), EAGAIN);
}

// Send-buffer accounting is per socket: another socket is unaffected.
TEST(Sendmsg, FullSndbufOfOneSocketDoesNotAffectAnother) {
  RDS_SKIP_UNDER_TSAN("fork of a multi-threaded process");
  StoppedPeer peer;
  ASSERT_TRUE(peer.Start());
  Fd s = FillSender();
  ASSERT_TRUE(s.ok());
  RDS_FILL_OR_SKIP(s.get(), peer.addr(), kFillMsg, nullptr);
  Pair p = MakePair();
  ASSERT_TRUE(p.ok());
  RDS_EXPECT_RC(SendTo(p.s.get(), std::string("free"), p.to, MSG_DONTWAIT), 4);
  EXPECT_EQ(RecvWithin(p.r.get()).data, "free");
  // Admission is per socket (rs_snd_bytes), not per destination: the full socket cannot send
  // to that free receiver either.
  RDS_EXPECT_ERRNO(SendTo(s.get(), std::string("x"), p.to, MSG_DONTWAIT), EAGAIN);
}

}  // namespace
}  // namespace rdstest
