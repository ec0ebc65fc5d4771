// getsockname()/getpeername() — kernel-rds.md §A.8b (rds_getname), §E.14.
#include "tests/conformance/rds_test_util.h"

namespace rdstest {
namespace {

// getsockname/getpeername into a buffer pre-filled with 0xAA, so that unwritten bytes show.
struct Name {
  int rc = -1;
  int err = 0;
  socklen_t len = 0;
  unsigned char bytes[sizeof(sockaddr_storage)];
  const sockaddr_in& in() const { return *reinterpret_cast<const sockaddr_in*>(bytes); }
  const sockaddr_in6& in6() const { return *reinterpret_cast<const sockaddr_in6*>(bytes); }
  sa_family_t family() const {
    sa_family_t f;
    memcpy(&f, bytes, sizeof f);
    return f;
  }
  bool AllZero(size_t n) const {
    for (size_t i = 0; i < n; ++i)
      if (bytes[i] != 0) return false;
    return true;
  }
};

Name Get(int fd, bool peer, socklen_t buflen = sizeof(sockaddr_storage)) {
  Name n;
  memset(n.bytes, 0xAA, sizeof n.bytes);
  n.len = buflen;
  errno = 0;
  n.rc = peer ? ::getpeername(fd, SA(n.bytes), &n.len) : ::getsockname(fd, SA(n.bytes), &n.len);
  n.err = n.rc < 0 ? errno : 0;
  return n;
}

void Connect(int fd, const sockaddr* a, socklen_t len) {
  ASSERT_EQ(::connect(fd, a, len), 0) << ErrnoName(errno);
}

// ---- getsockname on an unbound socket ----------------------------------------------------------

// §A.8b / §E.14: "Unconnected → an all-zero sockaddr_in with family AF_UNSPEC, length 16."
TEST(Getsockname, GetsocknameUnboundUnconnectedIsAfUnspecLen16) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  Name n = Get(s.get(), false);
  ASSERT_EQ(n.rc, 0) << ErrnoName(n.err);
  EXPECT_EQ(n.len, sizeof(sockaddr_in));
  EXPECT_EQ(n.family(), AF_UNSPEC);
  EXPECT_TRUE(n.AllZero(sizeof(sockaddr_in)));
  EXPECT_EQ(n.bytes[sizeof(sockaddr_in)], 0xAA) << "wrote past 16 bytes";
}

// "Connected to a v4 address → a zeroed sockaddr_in, family AF_INET, length 16."
TEST(Getsockname, GetsocknameUnboundConnectedToIpv4IsZeroedAfInetLen16) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in to = Lo4(5555);
  ASSERT_NO_FATAL_FAILURE(Connect(s.get(), SA(&to), sizeof to));
  Name n = Get(s.get(), false);
  ASSERT_EQ(n.rc, 0) << ErrnoName(n.err);
  EXPECT_EQ(n.len, sizeof(sockaddr_in));
  EXPECT_EQ(n.family(), AF_INET);
  EXPECT_EQ(n.in().sin_port, 0);
  EXPECT_EQ(n.in().sin_addr.s_addr, 0u);
}

// "Connected to a v6 (non-mapped) address → a zeroed sockaddr_in6, family AF_INET6, length 28."
TEST(Getsockname, GetsocknameUnboundConnectedToIpv6IsZeroedAfInet6Len28) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in6 to = Lo6(5555);
  ASSERT_NO_FATAL_FAILURE(Connect(s.get(), SA(&to), sizeof to));
  Name n = Get(s.get(), false);
  ASSERT_EQ(n.rc, 0) << ErrnoName(n.err);
  EXPECT_EQ(n.len, sizeof(sockaddr_in6));
  EXPECT_EQ(n.family(), AF_INET6);
  sockaddr_in6 zero{};
  zero.sin6_family = AF_INET6;
  EXPECT_EQ(memcmp(n.bytes, &zero, sizeof zero), 0);
}

// A v4-mapped connected address counts as IPv4.
TEST(Getsockname, GetsocknameUnboundConnectedToV4MappedIsZeroedAfInet) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in6 to = Sin6("::ffff:127.0.0.1", 5555);
  ASSERT_NO_FATAL_FAILURE(Connect(s.get(), SA(&to), sizeof to));
  Name n = Get(s.get(), false);
  ASSERT_EQ(n.rc, 0) << ErrnoName(n.err);
  EXPECT_EQ(n.len, sizeof(sockaddr_in));
  EXPECT_EQ(n.family(), AF_INET);
}

// ---- getsockname on a bound socket -----------------------------------------------------------------

TEST(Getsockname, GetsocknameBoundIpv4ReturnsTheAddressAndPort) {
  uint16_t port = UnusedPort4();
  ASSERT_GE(port, 2);
  Fd s = Bound4("127.0.0.1", port);
  ASSERT_TRUE(s.ok());
  Name n = Get(s.get(), false);
  ASSERT_EQ(n.rc, 0) << ErrnoName(n.err);
  EXPECT_EQ(n.len, sizeof(sockaddr_in));
  EXPECT_EQ(n.family(), AF_INET);
  EXPECT_EQ(n.in().sin_port, htons(port));
  EXPECT_EQ(n.in().sin_addr.s_addr, htonl(INADDR_LOOPBACK));
  for (unsigned char z : n.in().sin_zero) EXPECT_EQ(z, 0);
}

TEST(Getsockname, GetsocknameBoundWithPortZeroReturnsTheChosenPort) {
  Fd s = Bound4("127.0.0.1", 0);
  ASSERT_TRUE(s.ok());
  Name n = Get(s.get(), false);
  ASSERT_EQ(n.rc, 0);
  EXPECT_GE(ntohs(n.in().sin_port), 2);
}

TEST(Getsockname, GetsocknameBoundIpv6ReturnsASockaddrIn6) {
  Fd s = Bound6("::1", 0);
  ASSERT_TRUE(s.ok());
  Name n = Get(s.get(), false);
  ASSERT_EQ(n.rc, 0) << ErrnoName(n.err);
  EXPECT_EQ(n.len, sizeof(sockaddr_in6));
  EXPECT_EQ(n.family(), AF_INET6);
  EXPECT_GE(ntohs(n.in6().sin6_port), 2);
  EXPECT_TRUE(IN6_IS_ADDR_LOOPBACK(&n.in6().sin6_addr));
  EXPECT_EQ(n.in6().sin6_flowinfo, 0u);
  EXPECT_EQ(n.in6().sin6_scope_id, 0u);
}

// Bound through a v4-mapped IPv6 address: reported in the IPv4 format.
TEST(Getsockname, GetsocknameBoundToV4MappedAddressReturnsASockaddrIn) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in6 a = Sin6("::ffff:127.0.0.5", 0);
  ASSERT_EQ(::bind(s.get(), SA(&a), sizeof a), 0) << ErrnoName(errno);
  Name n = Get(s.get(), false);
  ASSERT_EQ(n.rc, 0);
  EXPECT_EQ(n.len, sizeof(sockaddr_in));
  EXPECT_EQ(n.family(), AF_INET);
  EXPECT_EQ(n.in().sin_addr.s_addr, Sin("127.0.0.5", 0).sin_addr.s_addr);
}

// Bound and connected: getsockname reports the binding, not the connection.
TEST(Getsockname, GetsocknameBoundAndConnectedReturnsTheBinding) {
  Fd s = Bound4("127.0.0.1", 0);
  ASSERT_TRUE(s.ok());
  uint16_t port = LocalPort(s.get());
  sockaddr_in6 to = Lo6(5555);  // a different family on purpose (§A.3: not checked)
  ASSERT_NO_FATAL_FAILURE(Connect(s.get(), SA(&to), sizeof to));
  Name n = Get(s.get(), false);
  ASSERT_EQ(n.rc, 0);
  EXPECT_EQ(n.family(), AF_INET);
  EXPECT_EQ(n.in().sin_port, htons(port));
}

// Generic (move_addr_to_user): a short buffer gets a truncated copy and the full length.
TEST(Getsockname, GetsocknameWithShortBufferTruncatesAndReportsTheFullLength) {
  Fd s = Bound4("127.0.0.1", 0);
  ASSERT_TRUE(s.ok());
  Name n = Get(s.get(), false, 4);
  ASSERT_EQ(n.rc, 0) << ErrnoName(n.err);
  EXPECT_EQ(n.len, sizeof(sockaddr_in));
  EXPECT_EQ(n.family(), AF_INET);
  EXPECT_EQ(n.bytes[4], 0xAA) << "wrote past the caller's length";
}

// A failed bind leaves the socket reporting "unbound".
TEST(Getsockname, GetsocknameAfterFailedBindIsStillAfUnspec) {
  Fd a = Bound4();
  ASSERT_TRUE(a.ok());
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in same = Name4(a.get());
  ASSERT_EQ(::bind(s.get(), SA(&same), sizeof same), -1);
  Name n = Get(s.get(), false);
  ASSERT_EQ(n.rc, 0);
  EXPECT_EQ(n.family(), AF_UNSPEC);
  EXPECT_EQ(n.len, sizeof(sockaddr_in));
}

// ---- getpeername ---------------------------------------------------------------------------------------

TEST(Getsockname, GetpeernameUnconnectedGivesEnotconn) {
  Fd unbound = RdsSocket();
  Fd bound = Bound4();
  ASSERT_TRUE(unbound.ok() && bound.ok());
  for (int fd : {unbound.get(), bound.get()}) {
    Name n = Get(fd, true);
    EXPECT_EQ(n.rc, -1);
    EXPECT_EQ(n.err, ENOTCONN) << ErrnoName(n.err);
  }
}

// Sending with an explicit name does not "connect" the socket.
TEST(Getsockname, GetpeernameAfterSendtoIsStillEnotconn) {
  Fd s = Bound4();
  Fd r = Bound4();
  ASSERT_TRUE(s.ok() && r.ok());
  ASSERT_EQ(SendTo(s.get(), std::string("x"), Name4(r.get())), 1);
  Name n = Get(s.get(), true);
  EXPECT_EQ(n.rc, -1);
  EXPECT_EQ(n.err, ENOTCONN);
}

// "a v4-mapped peer gives sockaddr_in (16 bytes)"
TEST(Getsockname, GetpeernameConnectedToIpv4ReturnsASockaddrIn) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in to = Sin("127.0.0.7", 6543);
  ASSERT_NO_FATAL_FAILURE(Connect(s.get(), SA(&to), sizeof to));
  Name n = Get(s.get(), true);
  ASSERT_EQ(n.rc, 0) << ErrnoName(n.err);
  EXPECT_EQ(n.len, sizeof(sockaddr_in));
  EXPECT_EQ(n.family(), AF_INET);
  EXPECT_EQ(n.in().sin_port, htons(6543));
  EXPECT_EQ(n.in().sin_addr.s_addr, to.sin_addr.s_addr);
  for (unsigned char z : n.in().sin_zero) EXPECT_EQ(z, 0);
}

// "a v6 peer gives sockaddr_in6 (28 bytes) with the bound scope id"
TEST(Getsockname, GetpeernameConnectedToIpv6ReturnsASockaddrIn6) {
  Fd s = Bound6();
  ASSERT_TRUE(s.ok());
  sockaddr_in6 to = Lo6(6543);
  ASSERT_NO_FATAL_FAILURE(Connect(s.get(), SA(&to), sizeof to));
  Name n = Get(s.get(), true);
  ASSERT_EQ(n.rc, 0) << ErrnoName(n.err);
  EXPECT_EQ(n.len, sizeof(sockaddr_in6));
  EXPECT_EQ(n.family(), AF_INET6);
  EXPECT_EQ(n.in6().sin6_port, htons(6543));
  EXPECT_TRUE(IN6_IS_ADDR_LOOPBACK(&n.in6().sin6_addr));
  EXPECT_EQ(n.in6().sin6_flowinfo, 0u);
  EXPECT_EQ(n.in6().sin6_scope_id, 0u);
}

TEST(Getsockname, GetpeernameConnectedToV4MappedReturnsASockaddrIn) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in6 to = Sin6("::ffff:127.0.0.8", 7000);
  ASSERT_NO_FATAL_FAILURE(Connect(s.get(), SA(&to), sizeof to));
  Name n = Get(s.get(), true);
  ASSERT_EQ(n.rc, 0);
  EXPECT_EQ(n.len, sizeof(sockaddr_in));
  EXPECT_EQ(n.family(), AF_INET);
  EXPECT_EQ(n.in().sin_port, htons(7000));
  EXPECT_EQ(n.in().sin_addr.s_addr, Sin("127.0.0.8", 0).sin_addr.s_addr);
}

// The connected port may be 0 (a ping destination): getpeername still reports it.
TEST(Getsockname, GetpeernameConnectedToPortZeroReportsIt) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in to = Lo4(0);
  ASSERT_NO_FATAL_FAILURE(Connect(s.get(), SA(&to), sizeof to));
  Name n = Get(s.get(), true);
  ASSERT_EQ(n.rc, 0) << ErrnoName(n.err);
  EXPECT_EQ(n.in().sin_port, 0);
}

TEST(Getsockname, GetpeernameReflectsTheLatestConnect) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in a = Lo4(1111);
  sockaddr_in6 b = Lo6(2222);
  ASSERT_NO_FATAL_FAILURE(Connect(s.get(), SA(&a), sizeof a));
  ASSERT_NO_FATAL_FAILURE(Connect(s.get(), SA(&b), sizeof b));
  Name n = Get(s.get(), true);
  ASSERT_EQ(n.rc, 0);
  EXPECT_EQ(n.family(), AF_INET6);
  EXPECT_EQ(n.in6().sin6_port, htons(2222));
}

TEST(Getsockname, GetpeernameWithShortBufferTruncatesAndReportsTheFullLength) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in6 to = Lo6(3333);
  ASSERT_NO_FATAL_FAILURE(Connect(s.get(), SA(&to), sizeof to));
  Name n = Get(s.get(), true, 8);
  ASSERT_EQ(n.rc, 0);
  EXPECT_EQ(n.len, sizeof(sockaddr_in6));
  EXPECT_EQ(n.family(), AF_INET6);
  EXPECT_EQ(n.bytes[8], 0xAA);
}

}  // namespace
}  // namespace rdstest
