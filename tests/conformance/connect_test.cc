// connect() — kernel-rds.md §A.3 (rds_connect), §E.14.
#include "tests/conformance/rds_test_util.h"

namespace rdstest {
namespace {

int ConnectRaw(int fd, const void* addr, socklen_t len) {
  return ::connect(fd, static_cast<const sockaddr*>(addr), len);
}

sockaddr_storage PeerName(int fd, socklen_t* len_out) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getpeername(fd, SA(&ss), &len) != 0) {
    ADD_FAILURE() << "getpeername: " << ErrnoName(errno);
    ss.ss_family = 0xffff;
  }
  *len_out = len;
  return ss;
}

// ---- §A.3: argument checks ------------------------------------------------------------------

TEST(Connect, ConnectWithAddrlenShorterThanSaFamilyGivesEinval) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in a = Lo4(5000);
  RDS_EXPECT_ERRNO(ConnectRaw(s.get(), &a, 1), EINVAL);
  RDS_EXPECT_ERRNO(ConnectRaw(s.get(), &a, 0), EINVAL);
}

TEST(Connect, ConnectIpv4WithAddrlenBelow16GivesEinval) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in a = Lo4(5000);
  RDS_EXPECT_ERRNO(ConnectRaw(s.get(), &a, sizeof a - 1), EINVAL);
  RDS_EXPECT_ERRNO(ConnectRaw(s.get(), &a, 8), EINVAL);
}

TEST(Connect, ConnectToInaddrAnyGivesEdestaddrreq) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in a = Sin("0.0.0.0", 5000);
  RDS_EXPECT_ERRNO(ConnectRaw(s.get(), &a, sizeof a), EDESTADDRREQ);
}

TEST(Connect, ConnectToMulticastGivesEinval) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in a = Sin("224.0.0.1", 5000);
  RDS_EXPECT_ERRNO(ConnectRaw(s.get(), &a, sizeof a), EINVAL);
}

TEST(Connect, ConnectToBroadcastGivesEinval) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in a = Sin("255.255.255.255", 5000);
  RDS_EXPECT_ERRNO(ConnectRaw(s.get(), &a, sizeof a), EINVAL);
}

TEST(Connect, ConnectIpv6WithAddrlenBelow28GivesEinval) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in6 a = Lo6(5000);
  RDS_EXPECT_ERRNO(ConnectRaw(s.get(), &a, sizeof a - 1), EINVAL);
  RDS_EXPECT_ERRNO(ConnectRaw(s.get(), &a, 24), EINVAL);
  RDS_EXPECT_ERRNO(ConnectRaw(s.get(), &a, 16), EINVAL);
}

// §A.3: a non-unicast, non-mapped IPv6 address → EPROTOTYPE (unlike bind, which says EINVAL).
TEST(Connect, ConnectIpv6UnspecifiedGivesEprototype) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in6 a = Sin6("::", 5000);
  RDS_EXPECT_ERRNO(ConnectRaw(s.get(), &a, sizeof a), EPROTOTYPE);
}

TEST(Connect, ConnectIpv6MulticastGivesEprototype) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in6 a = Sin6("ff02::1", 5000);
  RDS_EXPECT_ERRNO(ConnectRaw(s.get(), &a, sizeof a), EPROTOTYPE);
}

TEST(Connect, ConnectIpv6V4MappedAnyGivesEprototype) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in6 a = Sin6("::ffff:0.0.0.0", 5000);
  RDS_EXPECT_ERRNO(ConnectRaw(s.get(), &a, sizeof a), EPROTOTYPE);
}

TEST(Connect, ConnectIpv6V4MappedBroadcastGivesEprototype) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in6 a = Sin6("::ffff:255.255.255.255", 5000);
  RDS_EXPECT_ERRNO(ConnectRaw(s.get(), &a, sizeof a), EPROTOTYPE);
}

TEST(Connect, ConnectIpv6V4MappedMulticastGivesEprototype) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in6 a = Sin6("::ffff:239.1.2.3", 5000);
  RDS_EXPECT_ERRNO(ConnectRaw(s.get(), &a, sizeof a), EPROTOTYPE);
}

TEST(Connect, ConnectIpv6LinkLocalWithoutScopeIdGivesEinval) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in6 a = Sin6("fe80::1", 5000, 0);
  RDS_EXPECT_ERRNO(ConnectRaw(s.get(), &a, sizeof a), EINVAL);
}

// §A.3 / §E.14: AF_UNSPEC → EAFNOSUPPORT; there is no "disconnect".
TEST(Connect, ConnectAfUnspecGivesEafnosupport) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in a = Lo4(5000);
  a.sin_family = AF_UNSPEC;
  RDS_EXPECT_ERRNO(ConnectRaw(s.get(), &a, sizeof a), EAFNOSUPPORT);
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  RDS_EXPECT_ERRNO(::getpeername(s.get(), SA(&ss), &len), ENOTCONN);
}

TEST(Connect, ConnectAfUnspecDoesNotDisconnect) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in peer = Lo4(4321);
  RDS_ASSERT_RC(ConnectRaw(s.get(), &peer, sizeof peer), 0);
  sockaddr unspec{};
  unspec.sa_family = AF_UNSPEC;
  RDS_EXPECT_ERRNO(ConnectRaw(s.get(), &unspec, sizeof unspec), EAFNOSUPPORT);
  socklen_t len = 0;
  sockaddr_storage ss = PeerName(s.get(), &len);
  ASSERT_EQ(ss.ss_family, AF_INET);
  EXPECT_EQ(reinterpret_cast<sockaddr_in*>(&ss)->sin_port, htons(4321));
}

TEST(Connect, ConnectOtherFamilyGivesEafnosupport) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  for (int fam : {AF_UNIX, AF_PACKET, AF_RDS, 255}) {
    SCOPED_TRACE("family " + std::to_string(fam));
    sockaddr_storage ss{};
    sockaddr_in a = Lo4(5000);
    memcpy(&ss, &a, sizeof a);
    ss.ss_family = static_cast<sa_family_t>(fam);
    RDS_EXPECT_ERRNO(ConnectRaw(s.get(), &ss, sizeof(sockaddr_in6)), EAFNOSUPPORT);
  }
}

// A failed connect leaves the previous destination in place.
TEST(Connect, ConnectFailureKeepsThePreviousDestination) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in peer = Lo4(4321);
  RDS_ASSERT_RC(ConnectRaw(s.get(), &peer, sizeof peer), 0);
  sockaddr_in any = Sin("0.0.0.0", 9);
  RDS_EXPECT_ERRNO(ConnectRaw(s.get(), &any, sizeof any), EDESTADDRREQ);
  socklen_t len = 0;
  sockaddr_storage ss = PeerName(s.get(), &len);
  ASSERT_EQ(ss.ss_family, AF_INET);
  EXPECT_EQ(reinterpret_cast<sockaddr_in*>(&ss)->sin_port, htons(4321));
}

// ---- §A.3: what connect does ------------------------------------------------------------------

// "No network activity happens, and no bind is needed."
TEST(Connect, ConnectNeedsNoBind) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in peer = Lo4(7777);
  RDS_EXPECT_RC(ConnectRaw(s.get(), &peer, sizeof peer), 0);
  // Still unbound (§A.8b: zeroed sockaddr_in with the connected family).
  socklen_t len = 0;
  sockaddr_storage ss = LocalName(s.get(), &len);
  EXPECT_EQ(ss.ss_family, AF_INET);
  EXPECT_EQ(reinterpret_cast<sockaddr_in*>(&ss)->sin_port, 0);
}

// Connecting to a port nobody bound, or to port 0, just records it.
TEST(Connect, ConnectToAnUnboundPortSucceeds) {
  Fd s = Bound4();
  ASSERT_TRUE(s.ok());
  sockaddr_in nobody = Lo4(UnusedPort4());
  RDS_EXPECT_RC(ConnectRaw(s.get(), &nobody, sizeof nobody), 0);
  sockaddr_in zero = Lo4(0);
  RDS_EXPECT_RC(ConnectRaw(s.get(), &zero, sizeof zero), 0);
}

// connect never reports EINPROGRESS: it is immediate even on a non-blocking socket.
TEST(Connect, ConnectOnNonblockingSocketCompletesImmediately) {
  Fd s = RdsSocket(SOCK_NONBLOCK);
  ASSERT_TRUE(s.ok());
  sockaddr_in peer = Lo4(7001);
  RDS_EXPECT_RC(ConnectRaw(s.get(), &peer, sizeof peer), 0);
}

TEST(Connect, ConnectThenSendDeliversToTheConnectedPeer) {
  Fd a = Bound4();
  Fd b = Bound4();
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok());
  sockaddr_in to = Name4(b.get());
  RDS_ASSERT_RC(ConnectRaw(a.get(), &to, sizeof to), 0);
  RDS_ASSERT_RC(::send(a.get(), "hello", 5, 0), 5);
  Received r = RecvWithin(b.get());
  ASSERT_EQ(r.n, 5) << ErrnoName(r.err);
  EXPECT_EQ(r.data, "hello");
  EXPECT_EQ(r.from_port(), LocalPort(a.get()));
}

// §A.3: "It can be called again at any time to change the default destination."
TEST(Connect, ConnectAgainChangesTheDestination) {
  Fd a = Bound4();
  Fd b = Bound4();
  Fd c = Bound4();
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  sockaddr_in tb = Name4(b.get());
  sockaddr_in tc = Name4(c.get());
  RDS_ASSERT_RC(ConnectRaw(a.get(), &tb, sizeof tb), 0);
  RDS_ASSERT_RC(::send(a.get(), "one", 3, 0), 3);
  RDS_ASSERT_RC(ConnectRaw(a.get(), &tc, sizeof tc), 0);
  RDS_ASSERT_RC(::send(a.get(), "two", 3, 0), 3);
  Received rb = RecvWithin(b.get());
  Received rc = RecvWithin(c.get());
  EXPECT_EQ(rb.data, "one");
  EXPECT_EQ(rc.data, "two");
  ExpectNothingWithin(b.get(), 100);
}

// An explicit msg_name overrides the connected destination for that one message.
TEST(Connect, SendtoOnConnectedSocketGoesToTheGivenName) {
  Fd a = Bound4();
  Fd b = Bound4();
  Fd c = Bound4();
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  sockaddr_in tb = Name4(b.get());
  RDS_ASSERT_RC(ConnectRaw(a.get(), &tb, sizeof tb), 0);
  RDS_ASSERT_RC(SendTo(a.get(), "to-c", Name4(c.get())), 4);
  Received rc = RecvWithin(c.get());
  EXPECT_EQ(rc.data, "to-c");
  ExpectNothingWithin(b.get(), 100);
  // The connection itself is unchanged.
  RDS_ASSERT_RC(::send(a.get(), "to-b", 4, 0), 4);
  EXPECT_EQ(RecvWithin(b.get()).data, "to-b");
}

// §A.3: "connect does not check that the IPv4/IPv6 family matches the bound address."
TEST(Connect, ConnectDoesNotCheckFamilyAgainstTheBoundAddress) {
  Fd v4 = Bound4();
  Fd v6 = Bound6();
  ASSERT_TRUE(v4.ok() && v6.ok());
  sockaddr_in6 six = Lo6(6000);
  RDS_EXPECT_RC(ConnectRaw(v4.get(), &six, sizeof six), 0);
  sockaddr_in four = Lo4(6000);
  RDS_EXPECT_RC(ConnectRaw(v6.get(), &four, sizeof four), 0);
}

// A v4-mapped IPv6 destination is stored as the IPv4 address: getpeername gives a sockaddr_in
// (§A.8b) and an IPv4-bound socket can send to it without a name.
TEST(Connect, ConnectToV4MappedAddressIsAnIpv4Destination) {
  Fd a = Bound4();
  Fd b = Bound4();
  ASSERT_TRUE(a.ok() && b.ok());
  sockaddr_in6 mapped = Sin6("::ffff:127.0.0.1", LocalPort(b.get()));
  RDS_ASSERT_RC(ConnectRaw(a.get(), &mapped, sizeof mapped), 0);
  socklen_t len = 0;
  sockaddr_storage ss = PeerName(a.get(), &len);
  EXPECT_EQ(ss.ss_family, AF_INET);
  EXPECT_EQ(len, sizeof(sockaddr_in));
  RDS_ASSERT_RC(::send(a.get(), "mapped", 6, 0), 6);
  Received r = RecvWithin(b.get());
  EXPECT_EQ(r.data, "mapped");
  EXPECT_EQ(r.from.ss_family, AF_INET);
}

TEST(Connect, ConnectIpv6ThenSendDeliversToIpv6Peer) {
  Fd a = Bound6();
  Fd b = Bound6();
  ASSERT_TRUE(a.ok() && b.ok());
  sockaddr_in6 to = Name6(b.get());
  RDS_ASSERT_RC(ConnectRaw(a.get(), &to, sizeof to), 0);
  RDS_ASSERT_RC(::send(a.get(), "v6", 2, 0), 2);
  Received r = RecvWithin(b.get());
  EXPECT_EQ(r.data, "v6");
  EXPECT_EQ(r.from.ss_family, AF_INET6);
  EXPECT_EQ(r.from_port(), LocalPort(a.get()));
}

}  // namespace
}  // namespace rdstest
