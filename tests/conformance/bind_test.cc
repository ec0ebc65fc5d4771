// bind() — kernel-rds.md §A.2 (rds_bind, rds_add_bound, rds_trans_get_preferred), §E.14.
#include <set>

#include "tests/conformance/rds_test_util.h"

namespace rdstest {
namespace {

int BindRaw(int fd, const void* addr, socklen_t len) {
  return ::bind(fd, static_cast<const sockaddr*>(addr), len);
}

// True if `ip` is not a local address of this netns (a UDP socket cannot bind it). Used to
// avoid testing EADDRNOTAVAIL on a host that happens to own the documentation address.
bool IsNonLocal(int family, const char* ip) {
  int fd = ::socket(family, SOCK_DGRAM, 0);
  if (fd < 0) return false;
  int rc;
  if (family == AF_INET) {
    sockaddr_in a = Sin(ip, 0);
    rc = ::bind(fd, SA(&a), sizeof a);
  } else {
    sockaddr_in6 a = Sin6(ip, 0);
    rc = ::bind(fd, SA(&a), sizeof a);
  }
  int e = errno;
  ::close(fd);
  return rc != 0 && e == EADDRNOTAVAIL;
}

// ---- §A.2: address length and family -------------------------------------------------------

TEST(Bind, BindWithAddrlenShorterThanSaFamilyGivesEinval) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in a = Lo4(0);
  RDS_EXPECT_ERRNO(BindRaw(s.get(), &a, 1), EINVAL);
  RDS_EXPECT_ERRNO(BindRaw(s.get(), &a, 0), EINVAL);
}

// Generic layer (move_addr_to_kernel): a length above sizeof(sockaddr_storage) → EINVAL.
TEST(Bind, BindWithAddrlenAboveSockaddrStorageGivesEinval) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  char big[256] = {};
  sockaddr_in a = Lo4(0);
  memcpy(big, &a, sizeof a);
  RDS_EXPECT_ERRNO(BindRaw(s.get(), big, sizeof(sockaddr_storage) + 1), EINVAL);
}

TEST(Bind, BindIpv4WithAddrlenBelow16GivesEinval) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in a = Lo4(0);
  RDS_EXPECT_ERRNO(BindRaw(s.get(), &a, sizeof a - 1), EINVAL);
  RDS_EXPECT_ERRNO(BindRaw(s.get(), &a, 8), EINVAL);
  // The failed attempts left it unbound.
  RDS_EXPECT_RC(BindRaw(s.get(), &a, sizeof a), 0);
}

TEST(Bind, BindIpv4AcceptsAddrlenLongerThan16) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_storage ss{};
  sockaddr_in a = Lo4(0);
  memcpy(&ss, &a, sizeof a);
  RDS_EXPECT_RC(BindRaw(s.get(), &ss, sizeof ss), 0);
  EXPECT_EQ(LocalName(s.get()).ss_family, AF_INET);
}

TEST(Bind, BindRejectsInaddrAny) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in a = Sin("0.0.0.0", 0);
  RDS_EXPECT_ERRNO(BindRaw(s.get(), &a, sizeof a), EINVAL);
}

TEST(Bind, BindRejectsInaddrAnyWithExplicitPort) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in a = Sin("0.0.0.0", 4000);
  RDS_EXPECT_ERRNO(BindRaw(s.get(), &a, sizeof a), EINVAL);
}

TEST(Bind, BindRejectsBroadcast) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in a = Sin("255.255.255.255", 0);
  RDS_EXPECT_ERRNO(BindRaw(s.get(), &a, sizeof a), EINVAL);
}

TEST(Bind, BindRejectsMulticast) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  for (const char* ip : {"224.0.0.1", "239.255.255.255"}) {
    SCOPED_TRACE(ip);
    sockaddr_in a = Sin(ip, 0);
    RDS_EXPECT_ERRNO(BindRaw(s.get(), &a, sizeof a), EINVAL);
  }
}

TEST(Bind, BindIpv6WithAddrlenBelow28GivesEinval) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in6 a = Lo6(0);
  RDS_EXPECT_ERRNO(BindRaw(s.get(), &a, sizeof a - 1), EINVAL);
  RDS_EXPECT_ERRNO(BindRaw(s.get(), &a, 24), EINVAL);  // RFC 2133 size, without scope id
  RDS_EXPECT_ERRNO(BindRaw(s.get(), &a, 16), EINVAL);
}

TEST(Bind, BindIpv6RejectsUnspecifiedAddress) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in6 a = Sin6("::", 0);
  RDS_EXPECT_ERRNO(BindRaw(s.get(), &a, sizeof a), EINVAL);
}

TEST(Bind, BindIpv6RejectsMulticast) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  for (const char* ip : {"ff02::1", "ff05::2"}) {
    SCOPED_TRACE(ip);
    sockaddr_in6 a = Sin6(ip, 0);
    RDS_EXPECT_ERRNO(BindRaw(s.get(), &a, sizeof a), EINVAL);
  }
}

TEST(Bind, BindIpv6V4MappedAnyGivesEinval) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in6 a = Sin6("::ffff:0.0.0.0", 0);
  RDS_EXPECT_ERRNO(BindRaw(s.get(), &a, sizeof a), EINVAL);
}

TEST(Bind, BindIpv6V4MappedBroadcastGivesEinval) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in6 a = Sin6("::ffff:255.255.255.255", 0);
  RDS_EXPECT_ERRNO(BindRaw(s.get(), &a, sizeof a), EINVAL);
}

TEST(Bind, BindIpv6V4MappedMulticastGivesEinval) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in6 a = Sin6("::ffff:224.0.0.1", 0);
  RDS_EXPECT_ERRNO(BindRaw(s.get(), &a, sizeof a), EINVAL);
}

TEST(Bind, BindIpv6LinkLocalWithoutScopeIdGivesEinval) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in6 a = Sin6("fe80::1", 0, 0);
  RDS_EXPECT_ERRNO(BindRaw(s.get(), &a, sizeof a), EINVAL);
}

// §A.2 / §E.14: any family other than AF_INET/AF_INET6 → EINVAL (not EAFNOSUPPORT).
TEST(Bind, BindOtherFamilyGivesEinval) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  for (int fam : {AF_UNSPEC, AF_UNIX, AF_PACKET, AF_RDS, 255}) {
    SCOPED_TRACE("family " + std::to_string(fam));
    sockaddr_storage ss{};
    sockaddr_in a = Lo4(5000);
    memcpy(&ss, &a, sizeof a);
    ss.ss_family = static_cast<sa_family_t>(fam);
    RDS_EXPECT_ERRNO(BindRaw(s.get(), &ss, sizeof(sockaddr_in6)), EINVAL);
  }
}

// ---- §A.2: successful binds -----------------------------------------------------------------

TEST(Bind, BindIpv4LoopbackSucceeds) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in a = Lo4(0);
  RDS_ASSERT_RC(BindRaw(s.get(), &a, sizeof a), 0);
  sockaddr_in me = Name4(s.get());
  EXPECT_EQ(me.sin_addr.s_addr, htonl(INADDR_LOOPBACK));
  EXPECT_NE(me.sin_port, 0);
}

TEST(Bind, BindIpv6LoopbackSucceeds) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in6 a = Lo6(0);
  RDS_ASSERT_RC(BindRaw(s.get(), &a, sizeof a), 0);
  sockaddr_in6 me = Name6(s.get());
  EXPECT_TRUE(IN6_IS_ADDR_LOOPBACK(&me.sin6_addr));
  EXPECT_NE(me.sin6_port, 0);
}

// §A.2: a v4-mapped address is accepted and stored as the IPv4 address (§A.8b then reports
// a sockaddr_in).
TEST(Bind, BindIpv6V4MappedLoopbackIsAcceptedAsIpv4) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in6 a = Sin6("::ffff:127.0.0.1", 0);
  RDS_ASSERT_RC(BindRaw(s.get(), &a, sizeof a), 0);
  socklen_t len = 0;
  sockaddr_storage ss = LocalName(s.get(), &len);
  EXPECT_EQ(ss.ss_family, AF_INET);
  EXPECT_EQ(len, sizeof(sockaddr_in));
  EXPECT_EQ(reinterpret_cast<sockaddr_in*>(&ss)->sin_addr.s_addr, htonl(INADDR_LOOPBACK));
}

// §A.2: the address is stored as v4-mapped IPv6, so ::ffff:127.0.0.1:P and 127.0.0.1:P are the
// same binding.
TEST(Bind, BindV4MappedAndIpv4ShareOnePortSpace) {
  Fd a = Bound4();
  ASSERT_TRUE(a.ok());
  uint16_t port = LocalPort(a.get());
  Fd b = RdsSocket();
  ASSERT_TRUE(b.ok());
  sockaddr_in6 m = Sin6("::ffff:127.0.0.1", port);
  RDS_EXPECT_ERRNO(BindRaw(b.get(), &m, sizeof m), EADDRINUSE);
}

// §A.2: any 127.x.x.x address selects the loopback transport, so all of 127/8 is bindable.
TEST(Bind, BindAcceptsAnyAddressInTheLoopbackNet) {
  for (const char* ip : {"127.0.0.2", "127.1.2.3", "127.255.255.254"}) {
    SCOPED_TRACE(ip);
    Fd s = Bound4(ip);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(Name4(s.get()).sin_addr.s_addr, Sin(ip, 0).sin_addr.s_addr);
  }
}

// §A.2 transport selection + §A.7: a loopback-bound socket reports RDS_TRANS_LOOP (3).
TEST(Bind, BindLoopbackAddressSelectsLoopbackTransport) {
  Fd v4 = Bound4("127.0.0.1");
  Fd v4b = Bound4("127.0.0.9");
  Fd v6 = Bound6("::1");
  ASSERT_TRUE(v4.ok());
  ASSERT_TRUE(v4b.ok());
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(GetInt(v4.get(), SOL_RDS, SO_RDS_TRANSPORT), kRdsTransLoop);
  EXPECT_EQ(GetInt(v4b.get(), SOL_RDS, SO_RDS_TRANSPORT), kRdsTransLoop);
  EXPECT_EQ(GetInt(v6.get(), SOL_RDS, SO_RDS_TRANSPORT), kRdsTransLoop);
}

// §A.2: with SO_RDS_TRANSPORT set first, that transport's laddr_check decides; TCP accepts any
// local address, 127.0.0.1 included, and the socket stays on TCP.
TEST(Bind, BindWithTcpTransportOnLoopbackKeepsTcp) {
  BindOpts o;
  o.transport = RDS_TRANS_TCP;
  Fd s = Bound4("127.0.0.1", 0, o);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(GetInt(s.get(), SOL_RDS, SO_RDS_TRANSPORT), RDS_TRANS_TCP);
}

// §A.2 / §E.14: an address no transport accepts → EADDRNOTAVAIL.
TEST(Bind, BindNonLocalAddressGivesEaddrnotavail) {
  const char* ip = "192.0.2.1";  // TEST-NET-1; never contacted, only bound
  if (!IsNonLocal(AF_INET, ip)) GTEST_SKIP() << ip << " is local (or nonlocal_bind is on)";
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in a = Sin(ip, 0);
  RDS_EXPECT_ERRNO(BindRaw(s.get(), &a, sizeof a), EADDRNOTAVAIL);
  // Nothing was attached.
  EXPECT_EQ(GetInt(s.get(), SOL_RDS, SO_RDS_TRANSPORT), static_cast<int>(RDS_TRANS_NONE));
  EXPECT_EQ(LocalName(s.get()).ss_family, AF_UNSPEC);
}

TEST(Bind, BindNonLocalIpv6AddressGivesEaddrnotavail) {
  const char* ip = "2001:db8::1";  // documentation prefix; never contacted, only bound
  if (!IsNonLocal(AF_INET6, ip)) GTEST_SKIP() << ip << " is local or IPv6 is unavailable";
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in6 a = Sin6(ip, 0);
  RDS_EXPECT_ERRNO(BindRaw(s.get(), &a, sizeof a), EADDRNOTAVAIL);
}

// §A.2: SO_RDS_TRANSPORT set, and its laddr_check refuses the address → ENOPROTOOPT.
TEST(Bind, BindWithTcpTransportToNonLocalAddressGivesEnoprotoopt) {
  const char* ip = "192.0.2.1";
  if (!IsNonLocal(AF_INET, ip)) GTEST_SKIP() << ip << " is local (or nonlocal_bind is on)";
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(SetInt(s.get(), SOL_RDS, SO_RDS_TRANSPORT, RDS_TRANS_TCP));
  sockaddr_in a = Sin(ip, 0);
  RDS_EXPECT_ERRNO(BindRaw(s.get(), &a, sizeof a), ENOPROTOOPT);
}

// Kernel source (rds_bind, 6.12): the ENOPROTOOPT exit happens before port allocation and does
// not clear the transport; only a failed port allocation does (§A.2 last bullet). So the
// socket keeps TCP and can then be bound to a local address.
TEST(Bind, BindEnoprotooptKeepsTheTransportSetBySoRdsTransport) {
  const char* ip = "192.0.2.1";
  if (!IsNonLocal(AF_INET, ip)) GTEST_SKIP() << ip << " is local (or nonlocal_bind is on)";
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(SetInt(s.get(), SOL_RDS, SO_RDS_TRANSPORT, RDS_TRANS_TCP));
  sockaddr_in bad = Sin(ip, 0);
  RDS_EXPECT_ERRNO(BindRaw(s.get(), &bad, sizeof bad), ENOPROTOOPT);
  EXPECT_EQ(GetInt(s.get(), SOL_RDS, SO_RDS_TRANSPORT), RDS_TRANS_TCP);
  sockaddr_in good = Lo4(0);
  RDS_EXPECT_RC(BindRaw(s.get(), &good, sizeof good), 0);
  EXPECT_EQ(GetInt(s.get(), SOL_RDS, SO_RDS_TRANSPORT), RDS_TRANS_TCP);
}

// ---- §A.2: re-binding -------------------------------------------------------------------------

TEST(Bind, BindTwiceGivesEinval) {
  Fd s = Bound4();
  ASSERT_TRUE(s.ok());
  uint16_t port = LocalPort(s.get());
  sockaddr_in again = Lo4(0);
  RDS_EXPECT_ERRNO(BindRaw(s.get(), &again, sizeof again), EINVAL);
  sockaddr_in other = Sin("127.0.0.2", 0);
  RDS_EXPECT_ERRNO(BindRaw(s.get(), &other, sizeof other), EINVAL);
  sockaddr_in6 v6 = Lo6(0);
  RDS_EXPECT_ERRNO(BindRaw(s.get(), &v6, sizeof v6), EINVAL);
  // Still bound where it was.
  EXPECT_EQ(LocalPort(s.get()), port);
}

// The re-bind check comes after the address checks (rds_bind): an invalid address on a bound
// socket still gives EINVAL — and so does port 1 — without disturbing the binding.
TEST(Bind, BindTwiceWithPortOneGivesEinvalAndKeepsBinding) {
  Fd s = Bound4();
  ASSERT_TRUE(s.ok());
  uint16_t port = LocalPort(s.get());
  sockaddr_in p1 = Lo4(1);
  RDS_EXPECT_ERRNO(BindRaw(s.get(), &p1, sizeof p1), EINVAL);
  EXPECT_EQ(LocalPort(s.get()), port);
}

TEST(Bind, BindAfterFailedBindIsAllowed) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in any = Sin("0.0.0.0", 0);
  RDS_EXPECT_ERRNO(BindRaw(s.get(), &any, sizeof any), EINVAL);
  sockaddr_in lo = Lo4(0);
  RDS_EXPECT_RC(BindRaw(s.get(), &lo, sizeof lo), 0);
}

// §A.3: connect needs no bind, and bind after connect is allowed.
TEST(Bind, BindAfterConnectIsAllowed) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in peer = Lo4(4242);
  RDS_ASSERT_RC(::connect(s.get(), SA(&peer), sizeof peer), 0);
  sockaddr_in lo = Lo4(0);
  RDS_EXPECT_RC(BindRaw(s.get(), &lo, sizeof lo), 0);
  EXPECT_NE(LocalPort(s.get()), 0);
}

// ---- §A.2: ports ------------------------------------------------------------------------------

TEST(Bind, BindPortOneGivesEinval) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in a = Lo4(1);
  RDS_EXPECT_ERRNO(BindRaw(s.get(), &a, sizeof a), EINVAL);
}

TEST(Bind, BindIpv6PortOneGivesEinval) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in6 a = Lo6(1);
  RDS_EXPECT_ERRNO(BindRaw(s.get(), &a, sizeof a), EINVAL);
}

TEST(Bind, BindExplicitPortIsUsed) {
  uint16_t port = UnusedPort4();
  ASSERT_GE(port, 2);
  Fd s = Bound4("127.0.0.1", port);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(LocalPort(s.get()), port);
}

TEST(Bind, BindHighestPortIsAllowed) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in a = Sin("127.0.0.3", 65535);
  RDS_ASSERT_RC(BindRaw(s.get(), &a, sizeof a), 0);
  EXPECT_EQ(LocalPort(s.get()), 65535);
}

TEST(Bind, BindSamePortSameAddressGivesEaddrinuse) {
  Fd a = Bound4();
  ASSERT_TRUE(a.ok());
  uint16_t port = LocalPort(a.get());
  Fd b = RdsSocket();
  ASSERT_TRUE(b.ok());
  sockaddr_in same = Lo4(port);
  RDS_EXPECT_ERRNO(BindRaw(b.get(), &same, sizeof same), EADDRINUSE);
}

TEST(Bind, BindSamePortSameIpv6AddressGivesEaddrinuse) {
  Fd a = Bound6();
  ASSERT_TRUE(a.ok());
  uint16_t port = LocalPort(a.get());
  Fd b = RdsSocket();
  ASSERT_TRUE(b.ok());
  sockaddr_in6 same = Lo6(port);
  RDS_EXPECT_ERRNO(BindRaw(b.get(), &same, sizeof same), EADDRINUSE);
}

// §A.2: "The same port on a different local address is allowed."
TEST(Bind, BindSamePortOnDifferentAddressIsAllowed) {
  Fd a = Bound4("127.0.0.1");
  ASSERT_TRUE(a.ok());
  uint16_t port = LocalPort(a.get());
  Fd b = Bound4("127.0.0.2", port);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(LocalPort(b.get()), port);
  Fd c = Bound6("::1", port);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(LocalPort(c.get()), port);
}

// SO_REUSEADDR is accepted (generic) but does not relax RDS's exclusive bind table.
TEST(Bind, BindWithSoReuseaddrStillGivesEaddrinuse) {
  Fd a = RdsSocket();
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(SetInt(a.get(), SOL_SOCKET, SO_REUSEADDR, 1));
  sockaddr_in lo = Lo4(0);
  RDS_ASSERT_RC(BindRaw(a.get(), &lo, sizeof lo), 0);
  Fd b = RdsSocket();
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(SetInt(b.get(), SOL_SOCKET, SO_REUSEADDR, 1));
  sockaddr_in same = Lo4(LocalPort(a.get()));
  RDS_EXPECT_ERRNO(BindRaw(b.get(), &same, sizeof same), EADDRINUSE);
}

// §A.2: a failed port allocation clears the transport again, even one set through
// SO_RDS_TRANSPORT — so the option can be set again afterwards (it would give EOPNOTSUPP while
// a transport is attached, §A.7).
TEST(Bind, BindEaddrinuseClearsTheTransport) {
  Fd a = Bound4();
  ASSERT_TRUE(a.ok());
  Fd b = RdsSocket();
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(SetInt(b.get(), SOL_RDS, SO_RDS_TRANSPORT, RDS_TRANS_TCP));
  sockaddr_in same = Lo4(LocalPort(a.get()));
  RDS_EXPECT_ERRNO(BindRaw(b.get(), &same, sizeof same), EADDRINUSE);
  EXPECT_EQ(GetInt(b.get(), SOL_RDS, SO_RDS_TRANSPORT), static_cast<int>(RDS_TRANS_NONE));
  int tcp = RDS_TRANS_TCP;
  RDS_EXPECT_RC(::setsockopt(b.get(), SOL_RDS, SO_RDS_TRANSPORT, &tcp, sizeof tcp), 0);
}

TEST(Bind, BindEaddrinuseWithDefaultTransportLeavesNoTransport) {
  Fd a = Bound4();
  ASSERT_TRUE(a.ok());
  Fd b = RdsSocket();
  ASSERT_TRUE(b.ok());
  sockaddr_in same = Lo4(LocalPort(a.get()));
  RDS_EXPECT_ERRNO(BindRaw(b.get(), &same, sizeof same), EADDRINUSE);
  EXPECT_EQ(GetInt(b.get(), SOL_RDS, SO_RDS_TRANSPORT), static_cast<int>(RDS_TRANS_NONE));
}

// After EADDRINUSE the socket is still unbound and can bind elsewhere.
TEST(Bind, BindEaddrinuseLeavesTheSocketUnbound) {
  Fd a = Bound4();
  ASSERT_TRUE(a.ok());
  Fd b = RdsSocket();
  ASSERT_TRUE(b.ok());
  sockaddr_in same = Lo4(LocalPort(a.get()));
  RDS_EXPECT_ERRNO(BindRaw(b.get(), &same, sizeof same), EADDRINUSE);
  EXPECT_EQ(LocalName(b.get()).ss_family, AF_UNSPEC);
  sockaddr_in any_port = Lo4(0);
  RDS_EXPECT_RC(BindRaw(b.get(), &any_port, sizeof any_port), 0);
}

// §A.2: port 0 picks a free port in 2..65535 (never 0 or 1).
TEST(Bind, BindPortZeroPicksDistinctPortsOfAtLeastTwo) {
  std::vector<Fd> socks;
  std::set<uint16_t> ports;
  for (int i = 0; i < 64; ++i) {
    socks.push_back(Bound4());
    ASSERT_TRUE(socks.back().ok());
    uint16_t p = LocalPort(socks.back().get());
    EXPECT_GE(p, 2);
    ports.insert(p);
  }
  EXPECT_EQ(ports.size(), socks.size()) << "a port was handed out twice";
}

// §A.2: "The search starts at a random 16-bit value" — a fresh bind after a close does not
// simply get the same or the next port again.
TEST(Bind, BindPortZeroStartsAtARandomPort) {
  std::vector<uint16_t> seq;
  for (int i = 0; i < 16; ++i) {
    Fd s = Bound4("127.0.0.4");
    ASSERT_TRUE(s.ok());
    seq.push_back(LocalPort(s.get()));
  }
  std::set<uint16_t> distinct(seq.begin(), seq.end());
  EXPECT_GE(distinct.size(), 8u) << "port 0 keeps choosing the same few ports";
  int consecutive = 0;
  for (size_t i = 1; i < seq.size(); ++i)
    if (seq[i] == static_cast<uint16_t>(seq[i - 1] + 1)) ++consecutive;
  EXPECT_LT(consecutive, 8) << "port 0 allocates sequentially";
}

// §A.10 step 4: close unbinds, so the port can be bound again at once.
TEST(Bind, BindPortFreedByCloseCanBeBoundAgain) {
  uint16_t port;
  {
    Fd a = Bound4();
    ASSERT_TRUE(a.ok());
    port = LocalPort(a.get());
  }
  Fd b = Bound4("127.0.0.1", port);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(LocalPort(b.get()), port);
}

}  // namespace
}  // namespace rdstest
