// setsockopt()/getsockopt() — kernel-rds.md §A.7 (rds_setsockopt, rds_getsockopt, rdma.c),
// §A.8 (RDS_INFO_* length negotiation, COUNTERS and SOCKETS only), §B.5, plus the generic
// SOL_SOCKET options every socket has.
#include "tests/conformance/rds_test_util.h"

namespace rdstest {
namespace {

int SetRaw(int fd, int level, int name, const void* v, socklen_t len) {
  return ::setsockopt(fd, level, name, v, len);
}

bool HasCapNetAdmin() {
  FILE* f = fopen("/proc/self/status", "r");
  if (!f) return false;
  char line[256];
  unsigned long long eff = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "CapEff: %llx", &eff) == 1) break;
  fclose(f);
  return eff & (1ull << 12);  // CAP_NET_ADMIN
}

// ---- SOL_SOCKET: identity ----------------------------------------------------------------------

TEST(Sockopt, SoDomainIsAfRds) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(GetInt(s.get(), SOL_SOCKET, SO_DOMAIN), AF_RDS);
}

TEST(Sockopt, SoTypeIsSockSeqpacket) {
  Fd s = RdsSocket(SOCK_NONBLOCK | SOCK_CLOEXEC);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(GetInt(s.get(), SOL_SOCKET, SO_TYPE), SOCK_SEQPACKET);
}

TEST(Sockopt, SoProtocolIsZero) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(GetInt(s.get(), SOL_SOCKET, SO_PROTOCOL), 0);
}

TEST(Sockopt, SoErrorIsZero) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(GetInt(s.get(), SOL_SOCKET, SO_ERROR), 0);
  Fd b = Bound4();
  ASSERT_TRUE(b.ok());
  // Even after a failed send and a message to nowhere (sendmsg never reports, §A.4 step 9).
  RDS_EXPECT_ERRNO(::send(b.get(), "x", 1, 0), ENOTCONN);
  RDS_EXPECT_RC(SendTo(b.get(), std::string("x"), Lo4(UnusedPort4())), 1);
  SleepMs(kSettleMs);
  EXPECT_EQ(GetInt(b.get(), SOL_SOCKET, SO_ERROR), 0);
}

// ---- SOL_SOCKET: buffer sizes (§A.7) -----------------------------------------------------------

TEST(Sockopt, SoSndbufGetReturnsTwiceTheSetValue) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(SetInt(s.get(), SOL_SOCKET, SO_SNDBUF, 50000));
  EXPECT_EQ(GetInt(s.get(), SOL_SOCKET, SO_SNDBUF), 100000);
}

TEST(Sockopt, SoRcvbufGetReturnsTwiceTheSetValue) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(SetInt(s.get(), SOL_SOCKET, SO_RCVBUF, 50000));
  EXPECT_EQ(GetInt(s.get(), SOL_SOCKET, SO_RCVBUF), 100000);
}

TEST(Sockopt, SoSndbufIsCappedByWmemMax) {
  long wmax = ReadProcLong("/proc/sys/net/core/wmem_max");
  if (wmax <= 0 || wmax > (1L << 28)) GTEST_SKIP() << "wmem_max unreadable or huge";
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(SetInt(s.get(), SOL_SOCKET, SO_SNDBUF, static_cast<int>(wmax + 4096)));
  EXPECT_EQ(GetInt(s.get(), SOL_SOCKET, SO_SNDBUF), 2 * wmax);
}

TEST(Sockopt, SoRcvbufIsCappedByRmemMax) {
  long rmax = ReadProcLong("/proc/sys/net/core/rmem_max");
  if (rmax <= 0 || rmax > (1L << 28)) GTEST_SKIP() << "rmem_max unreadable or huge";
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(SetInt(s.get(), SOL_SOCKET, SO_RCVBUF, static_cast<int>(rmax + 4096)));
  EXPECT_EQ(GetInt(s.get(), SOL_SOCKET, SO_RCVBUF), 2 * rmax);
}

// Floored at SOCK_MIN_SNDBUF / SOCK_MIN_RCVBUF (measured on a UDP socket: it depends on
// sizeof(struct sk_buff) of the running kernel).
TEST(Sockopt, SoSndbufIsFlooredAtTheKernelMinimum) {
  int floor = KernelMinBuf(SO_SNDBUF);
  ASSERT_GT(floor, 2);
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  for (int v : {0, 1, floor / 4}) {
    SCOPED_TRACE(v);
    ASSERT_TRUE(SetInt(s.get(), SOL_SOCKET, SO_SNDBUF, v));
    EXPECT_EQ(GetInt(s.get(), SOL_SOCKET, SO_SNDBUF), floor);
  }
}

TEST(Sockopt, SoRcvbufIsFlooredAtTheKernelMinimum) {
  int floor = KernelMinBuf(SO_RCVBUF);
  ASSERT_GT(floor, 2);
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  for (int v : {0, 1, floor / 4}) {
    SCOPED_TRACE(v);
    ASSERT_TRUE(SetInt(s.get(), SOL_SOCKET, SO_RCVBUF, v));
    EXPECT_EQ(GetInt(s.get(), SOL_SOCKET, SO_RCVBUF), floor);
  }
}

// The doubling/capping/flooring is the generic one: an RDS socket agrees with a UDP socket.
TEST(Sockopt, SoSndbufAndSoRcvbufAgreeWithTheGenericSocketLayer) {
  int udp = ::socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(udp, 0);
  Fd u(udp);
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  for (int opt : {SO_SNDBUF, SO_RCVBUF}) {
    for (int v : {1, 1000, 4096, 65536, 200000, 1 << 22, 1 << 26}) {
      SCOPED_TRACE("opt " + std::to_string(opt) + " value " + std::to_string(v));
      ASSERT_TRUE(SetInt(u.get(), SOL_SOCKET, opt, v));
      ASSERT_TRUE(SetInt(s.get(), SOL_SOCKET, opt, v));
      EXPECT_EQ(GetInt(s.get(), SOL_SOCKET, opt), GetInt(u.get(), SOL_SOCKET, opt));
    }
  }
}

// SO_SNDBUFFORCE/SO_RCVBUFFORCE: with CAP_NET_ADMIN the max is not applied; without, EPERM.
TEST(Sockopt, SoSndbufforceNeedsCapNetAdminAndIgnoresWmemMax) {
  long wmax = ReadProcLong("/proc/sys/net/core/wmem_max");
  if (wmax <= 0 || wmax > (1L << 26)) GTEST_SKIP() << "wmem_max unreadable or huge";
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  int want = static_cast<int>(wmax + 65536);
  if (HasCapNetAdmin()) {
    RDS_ASSERT_RC(SetRaw(s.get(), SOL_SOCKET, SO_SNDBUFFORCE, &want, sizeof want), 0);
    EXPECT_EQ(GetInt(s.get(), SOL_SOCKET, SO_SNDBUF), 2 * want);
    RDS_ASSERT_RC(SetRaw(s.get(), SOL_SOCKET, SO_RCVBUFFORCE, &want, sizeof want), 0);
    EXPECT_EQ(GetInt(s.get(), SOL_SOCKET, SO_RCVBUF), 2 * want);
  } else {
    RDS_EXPECT_ERRNO(SetRaw(s.get(), SOL_SOCKET, SO_SNDBUFFORCE, &want, sizeof want), EPERM);
  }
}

// ---- SOL_SOCKET: other generic options ------------------------------------------------------------

TEST(Sockopt, SoReuseaddrIsAccepted) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(GetInt(s.get(), SOL_SOCKET, SO_REUSEADDR), 0);
  ASSERT_TRUE(SetInt(s.get(), SOL_SOCKET, SO_REUSEADDR, 1));
  EXPECT_EQ(GetInt(s.get(), SOL_SOCKET, SO_REUSEADDR), 1);
  ASSERT_TRUE(SetInt(s.get(), SOL_SOCKET, SO_REUSEADDR, 0));
  EXPECT_EQ(GetInt(s.get(), SOL_SOCKET, SO_REUSEADDR), 0);
}

void ExpectTimeoutRoundTrip(int optname) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  timeval tv{-1, -1};
  socklen_t len = sizeof tv;
  ASSERT_EQ(::getsockopt(s.get(), SOL_SOCKET, optname, &tv, &len), 0) << ErrnoName(errno);
  EXPECT_EQ(len, sizeof tv);
  EXPECT_EQ(tv.tv_sec, 0);
  EXPECT_EQ(tv.tv_usec, 0);
  // Values that are whole jiffies for HZ = 100, 250 and 1000 (the kernel stores jiffies).
  for (timeval set : {timeval{2, 0}, timeval{0, 500000}, timeval{1, 200000}}) {
    SCOPED_TRACE(std::to_string(set.tv_sec) + "s " + std::to_string(set.tv_usec) + "us");
    ASSERT_EQ(::setsockopt(s.get(), SOL_SOCKET, optname, &set, sizeof set), 0) << ErrnoName(errno);
    timeval got{-1, -1};
    len = sizeof got;
    ASSERT_EQ(::getsockopt(s.get(), SOL_SOCKET, optname, &got, &len), 0) << ErrnoName(errno);
    EXPECT_EQ(got.tv_sec, set.tv_sec);
    EXPECT_EQ(got.tv_usec, set.tv_usec);
  }
}

TEST(Sockopt, SoRcvtimeoRoundTrips) { ExpectTimeoutRoundTrip(SO_RCVTIMEO); }
TEST(Sockopt, SoSndtimeoRoundTrips) { ExpectTimeoutRoundTrip(SO_SNDTIMEO); }

// Generic sock_set_timeout: an optlen shorter than struct timeval → EINVAL.
TEST(Sockopt, SoRcvtimeoWithShortOptlenGivesEinval) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  timeval tv{1, 0};
  RDS_EXPECT_ERRNO(SetRaw(s.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, 4), EINVAL);
}

// Generic: SO_ZEROCOPY is allowed for PF_RDS (sock_setsockopt names it explicitly).
TEST(Sockopt, SoZerocopyIsAccepted) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(SetInt(s.get(), SOL_SOCKET, SO_ZEROCOPY, 1));
  EXPECT_EQ(GetInt(s.get(), SOL_SOCKET, SO_ZEROCOPY), 1);
}

TEST(Sockopt, SoTimestampRoundTripsAtSolSocket) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(GetInt(s.get(), SOL_SOCKET, SO_TIMESTAMP), 0);
  ASSERT_TRUE(SetInt(s.get(), SOL_SOCKET, SO_TIMESTAMP, 1));
  EXPECT_EQ(GetInt(s.get(), SOL_SOCKET, SO_TIMESTAMP), 1);
}

// ---- levels and unknown options (§A.7) ------------------------------------------------------------

TEST(Sockopt, UnknownLevelGivesEnoprotoopt) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  int v = 1;
  for (int level : {int{IPPROTO_IP}, int{IPPROTO_TCP}, int{IPPROTO_IPV6}, 12345}) {
    SCOPED_TRACE("level " + std::to_string(level));
    RDS_EXPECT_ERRNO(SetRaw(s.get(), level, 1, &v, sizeof v), ENOPROTOOPT);
    socklen_t len = sizeof v;
    RDS_EXPECT_ERRNO(::getsockopt(s.get(), level, 1, &v, &len), ENOPROTOOPT);
  }
}

TEST(Sockopt, UnknownSolRdsOptionGivesEnoprotoopt) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  int v = 1;
  for (int opt : {0, 4 /* deprecated RDS_BARRIER */, 9, 11, 9999}) {
    SCOPED_TRACE("option " + std::to_string(opt));
    RDS_EXPECT_ERRNO(SetRaw(s.get(), SOL_RDS, opt, &v, sizeof v), ENOPROTOOPT);
    socklen_t len = sizeof v;
    RDS_EXPECT_ERRNO(::getsockopt(s.get(), SOL_RDS, opt, &v, &len), ENOPROTOOPT);
  }
}

// §A.7: getsockopt knows only RECVERR, SO_RDS_TRANSPORT and RDS_INFO_*; "Everything else,
// including RDS_CONG_MONITOR, → ENOPROTOOPT."
TEST(Sockopt, GetsockoptOfSetOnlySolRdsOptionsGivesEnoprotoopt) {
  Fd s = Bound4();
  ASSERT_TRUE(s.ok());
  for (int opt : {RDS_CANCEL_SENT_TO, RDS_GET_MR, RDS_FREE_MR, RDS_CONG_MONITOR,
                  RDS_GET_MR_FOR_DEST, SO_RDS_MSG_RXPATH_LATENCY, SO_TIMESTAMP_OLD,
                  SO_TIMESTAMP_NEW}) {
    SCOPED_TRACE("option " + std::to_string(opt));
    char buf[256] = {};
    socklen_t len = sizeof buf;
    RDS_EXPECT_ERRNO(::getsockopt(s.get(), SOL_RDS, opt, buf, &len), ENOPROTOOPT);
  }
}

// §A.7: SO_TIMESTAMP / SO_TIMESTAMP_NEW are accepted at SOL_RDS with optlen exactly 4.
TEST(Sockopt, SolRdsSoTimestampWithOptlenFourIsAccepted) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  int one = 1;
  RDS_EXPECT_RC(SetRaw(s.get(), SOL_RDS, SO_TIMESTAMP_OLD, &one, sizeof one), 0);
  EXPECT_EQ(GetInt(s.get(), SOL_SOCKET, SO_TIMESTAMP_OLD), 1);
  int zero = 0;
  RDS_EXPECT_RC(SetRaw(s.get(), SOL_RDS, SO_TIMESTAMP_OLD, &zero, sizeof zero), 0);
  EXPECT_EQ(GetInt(s.get(), SOL_SOCKET, SO_TIMESTAMP_OLD), 0);
  RDS_EXPECT_RC(SetRaw(s.get(), SOL_RDS, SO_TIMESTAMP_NEW, &one, sizeof one), 0);
}

TEST(Sockopt, SolRdsSoTimestampWithOtherOptlenGivesEfault) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  int64_t v = 1;
  for (socklen_t len : {0u, 2u, 8u}) {
    SCOPED_TRACE(len);
    RDS_EXPECT_ERRNO(SetRaw(s.get(), SOL_RDS, SO_TIMESTAMP_OLD, &v, len), EFAULT);
    RDS_EXPECT_ERRNO(SetRaw(s.get(), SOL_RDS, SO_TIMESTAMP_NEW, &v, len), EFAULT);
  }
}

// ---- RDS_CANCEL_SENT_TO (§A.7) ---------------------------------------------------------------------

TEST(Sockopt, CancelSentToOnUnboundSocketGivesEnotconn) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in to = Lo4(5000);
  RDS_EXPECT_ERRNO(SetRaw(s.get(), SOL_RDS, RDS_CANCEL_SENT_TO, &to, sizeof to), ENOTCONN);
}

// The bound check comes first: an unbound socket with a short optlen still gets ENOTCONN.
TEST(Sockopt, CancelSentToUnboundCheckComesBeforeTheLengthCheck) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_in to = Lo4(5000);
  RDS_EXPECT_ERRNO(SetRaw(s.get(), SOL_RDS, RDS_CANCEL_SENT_TO, &to, 4), ENOTCONN);
}

TEST(Sockopt, CancelSentToWithOptlenBelow16GivesEinval) {
  Fd s = Bound4();
  ASSERT_TRUE(s.ok());
  sockaddr_in to = Lo4(5000);
  RDS_EXPECT_ERRNO(SetRaw(s.get(), SOL_RDS, RDS_CANCEL_SENT_TO, &to, 15), EINVAL);
  RDS_EXPECT_ERRNO(SetRaw(s.get(), SOL_RDS, RDS_CANCEL_SENT_TO, &to, 0), EINVAL);
}

// 16..27 bytes are read as a sockaddr_in, >= 28 as a sockaddr_in6; the family is not checked.
TEST(Sockopt, CancelSentToAcceptsBothAddressSizesAndIgnoresTheFamily) {
  Fd s = Bound4();
  ASSERT_TRUE(s.ok());
  sockaddr_in v4 = Lo4(5000);
  RDS_EXPECT_RC(SetRaw(s.get(), SOL_RDS, RDS_CANCEL_SENT_TO, &v4, sizeof v4), 0);
  sockaddr_in6 v6 = Lo6(5000);
  RDS_EXPECT_RC(SetRaw(s.get(), SOL_RDS, RDS_CANCEL_SENT_TO, &v6, sizeof v6), 0);
  sockaddr_in odd = Lo4(5000);
  odd.sin_family = AF_UNIX;
  RDS_EXPECT_RC(SetRaw(s.get(), SOL_RDS, RDS_CANCEL_SENT_TO, &odd, sizeof odd), 0);
  char big[64] = {};
  memcpy(big, &v6, sizeof v6);
  RDS_EXPECT_RC(SetRaw(s.get(), SOL_RDS, RDS_CANCEL_SENT_TO, big, sizeof big), 0);
}

// Effect: queued messages to that address and port are removed and their sndbuf bytes freed;
// they are never delivered.
TEST(Sockopt, CancelSentToDropsQueuedMessagesAndFreesTheSndbuf) {
  RDS_SKIP_UNDER_TSAN("fork of a multi-threaded process");
  StoppedPeer peer;
  ASSERT_TRUE(peer.Start());
  constexpr int kSndbuf = 32768;
  constexpr size_t kMsg = 4096;
  BindOpts o;
  o.sndbuf = kSndbuf;
  Fd s = Bound4("127.0.0.1", 0, o);
  ASSERT_TRUE(s.ok());
  long sent = 0;
  RDS_FILL_OR_SKIP(s.get(), peer.addr(), kMsg, &sent);
  RDS_EXPECT_RC(CancelSentTo(s.get(), peer.addr()), 0);
  // Room again.
  RDS_EXPECT_RC(SendTo(s.get(), Payload(kMsg), peer.addr(), MSG_DONTWAIT), kMsg);
  // At least the messages that filled the buffer (less one possibly mid-transmission) never
  // arrive.
  long got = peer.ResumeAndCount();
  ASSERT_GE(got, 0);
  EXPECT_LE(got, sent + 1 - (kSndbuf / static_cast<long>(kMsg) - 1))
      << "sent " << sent << " + 1, peer got " << got;
}

// Only messages to the given address and port are affected.
TEST(Sockopt, CancelSentToAnotherDestinationFreesNothing) {
  RDS_SKIP_UNDER_TSAN("fork of a multi-threaded process");
  StoppedPeer peer;
  ASSERT_TRUE(peer.Start());
  BindOpts o;
  o.sndbuf = 32768;
  Fd s = Bound4("127.0.0.1", 0, o);
  ASSERT_TRUE(s.ok());
  RDS_FILL_OR_SKIP(s.get(), peer.addr(), 4096, nullptr);
  sockaddr_in other_port = peer.addr();
  other_port.sin_port = htons(static_cast<uint16_t>(peer.port() ^ 1));
  RDS_EXPECT_RC(CancelSentTo(s.get(), other_port), 0);
  sockaddr_in other_addr = peer.addr();
  other_addr.sin_addr.s_addr = htonl(0x7f000002);
  RDS_EXPECT_RC(CancelSentTo(s.get(), other_addr), 0);
  SleepMs(kSettleMs);
  RDS_EXPECT_ERRNO(SendTo(s.get(), std::string("x"), peer.addr(), MSG_DONTWAIT), EAGAIN);
}

// ---- RDMA options on a loopback/TCP socket (§A.7, rdma.c) ----------------------------------------

alignas(4096) char g_mr_mem[4096];
uint64_t g_cookie;

rds_get_mr_args GetMrArgs() {
  rds_get_mr_args a{};
  a.vec.addr = reinterpret_cast<uint64_t>(g_mr_mem);
  a.vec.bytes = sizeof g_mr_mem;
  a.cookie_addr = reinterpret_cast<uint64_t>(&g_cookie);
  a.flags = 0;
  return a;
}

rds_get_mr_for_dest_args GetMrForDestArgs() {
  rds_get_mr_for_dest_args a{};
  sockaddr_in to = Lo4(5000);
  memcpy(&a.dest_addr, &to, sizeof to);
  a.vec.addr = reinterpret_cast<uint64_t>(g_mr_mem);
  a.vec.bytes = sizeof g_mr_mem;
  a.cookie_addr = reinterpret_cast<uint64_t>(&g_cookie);
  return a;
}

TEST(Sockopt, GetMrWithWrongOptlenGivesEinval) {
  Fd s = RdsSocket();  // the length is checked before anything else, even unbound
  ASSERT_TRUE(s.ok());
  rds_get_mr_args a = GetMrArgs();
  RDS_EXPECT_ERRNO(SetRaw(s.get(), SOL_RDS, RDS_GET_MR, &a, sizeof a - 1), EINVAL);
  char big[sizeof a + 8] = {};
  memcpy(big, &a, sizeof a);
  RDS_EXPECT_ERRNO(SetRaw(s.get(), SOL_RDS, RDS_GET_MR, big, sizeof big), EINVAL);
}

TEST(Sockopt, GetMrOnUnboundSocketGivesEnotconn) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  rds_get_mr_args a = GetMrArgs();
  RDS_EXPECT_ERRNO(SetRaw(s.get(), SOL_RDS, RDS_GET_MR, &a, sizeof a), ENOTCONN);
}

TEST(Sockopt, GetMrOnLoopbackSocketGivesEopnotsupp) {
  Fd s = Bound4();
  ASSERT_TRUE(s.ok());
  rds_get_mr_args a = GetMrArgs();
  RDS_EXPECT_ERRNO(SetRaw(s.get(), SOL_RDS, RDS_GET_MR, &a, sizeof a), EOPNOTSUPP);
}

TEST(Sockopt, GetMrOnTcpSocketGivesEopnotsupp) {
  Fd s = TcpTransportSender();
  ASSERT_TRUE(s.ok());
  rds_get_mr_args a = GetMrArgs();
  RDS_EXPECT_ERRNO(SetRaw(s.get(), SOL_RDS, RDS_GET_MR, &a, sizeof a), EOPNOTSUPP);
}

TEST(Sockopt, GetMrForDestWithWrongOptlenGivesEinval) {
  Fd s = Bound4();
  ASSERT_TRUE(s.ok());
  rds_get_mr_for_dest_args a = GetMrForDestArgs();
  RDS_EXPECT_ERRNO(SetRaw(s.get(), SOL_RDS, RDS_GET_MR_FOR_DEST, &a, sizeof a - 8), EINVAL);
  // A plain rds_get_mr_args is the wrong size for this option.
  rds_get_mr_args small = GetMrArgs();
  RDS_EXPECT_ERRNO(SetRaw(s.get(), SOL_RDS, RDS_GET_MR_FOR_DEST, &small, sizeof small), EINVAL);
}

TEST(Sockopt, GetMrForDestOnUnboundSocketGivesEnotconn) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  rds_get_mr_for_dest_args a = GetMrForDestArgs();
  RDS_EXPECT_ERRNO(SetRaw(s.get(), SOL_RDS, RDS_GET_MR_FOR_DEST, &a, sizeof a), ENOTCONN);
}

TEST(Sockopt, GetMrForDestOnLoopbackSocketGivesEopnotsupp) {
  Fd s = Bound4();
  ASSERT_TRUE(s.ok());
  rds_get_mr_for_dest_args a = GetMrForDestArgs();
  RDS_EXPECT_ERRNO(SetRaw(s.get(), SOL_RDS, RDS_GET_MR_FOR_DEST, &a, sizeof a), EOPNOTSUPP);
}

// "FREE_MR with cookie 0 means flush. TCP has no flush → EINVAL."
TEST(Sockopt, FreeMrWithCookieZeroGivesEinval) {
  Fd unbound = RdsSocket();
  Fd lo = Bound4();
  Fd tcp = TcpTransportSender();
  ASSERT_TRUE(unbound.ok() && lo.ok() && tcp.ok());
  rds_free_mr_args a{};
  a.cookie = 0;
  for (int fd : {unbound.get(), lo.get(), tcp.get()})
    RDS_EXPECT_ERRNO(SetRaw(fd, SOL_RDS, RDS_FREE_MR, &a, sizeof a), EINVAL);
}

TEST(Sockopt, FreeMrWithUnknownCookieGivesEinval) {
  Fd s = Bound4();
  ASSERT_TRUE(s.ok());
  rds_free_mr_args a{};
  a.cookie = 0x12345678ull;
  RDS_EXPECT_ERRNO(SetRaw(s.get(), SOL_RDS, RDS_FREE_MR, &a, sizeof a), EINVAL);
}

TEST(Sockopt, FreeMrWithWrongOptlenGivesEinval) {
  Fd s = Bound4();
  ASSERT_TRUE(s.ok());
  rds_free_mr_args a{};
  RDS_EXPECT_ERRNO(SetRaw(s.get(), SOL_RDS, RDS_FREE_MR, &a, sizeof a - 1), EINVAL);
}

// ---- RDS_RECVERR and RDS_CONG_MONITOR (§A.7) --------------------------------------------------------

TEST(Sockopt, RecverrDefaultsToZero) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(GetInt(s.get(), SOL_RDS, RDS_RECVERR), 0);
}

TEST(Sockopt, RecverrIsABooleanThatReadsBackAsOne) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(SetInt(s.get(), SOL_RDS, RDS_RECVERR, 7));
  EXPECT_EQ(GetInt(s.get(), SOL_RDS, RDS_RECVERR), 1);
  ASSERT_TRUE(SetInt(s.get(), SOL_RDS, RDS_RECVERR, 0));
  EXPECT_EQ(GetInt(s.get(), SOL_RDS, RDS_RECVERR), 0);
}

TEST(Sockopt, RecverrSetWithOptlenBelow4GivesEinval) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  int v = 1;
  RDS_EXPECT_ERRNO(SetRaw(s.get(), SOL_RDS, RDS_RECVERR, &v, 2), EINVAL);
  EXPECT_EQ(GetInt(s.get(), SOL_RDS, RDS_RECVERR), 0);
}

TEST(Sockopt, RecverrGetWithOptlenBelow4GivesEinval) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  char v[4];
  socklen_t len = 3;
  RDS_EXPECT_ERRNO(::getsockopt(s.get(), SOL_RDS, RDS_RECVERR, v, &len), EINVAL);
}

TEST(Sockopt, RecverrGetSetsOptlenToFour) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  int64_t v = -1;
  socklen_t len = sizeof v;
  ASSERT_EQ(::getsockopt(s.get(), SOL_RDS, RDS_RECVERR, &v, &len), 0) << ErrnoName(errno);
  EXPECT_EQ(len, 4u);
}

TEST(Sockopt, CongMonitorSetWithOptlenBelow4GivesEinval) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  int v = 1;
  RDS_EXPECT_ERRNO(SetRaw(s.get(), SOL_RDS, RDS_CONG_MONITOR, &v, 1), EINVAL);
}

TEST(Sockopt, CongMonitorIsABooleanOption) {
  Fd s = Bound4();
  ASSERT_TRUE(s.ok());
  int64_t mask = 0xffff;  // "does not take a mask": any int-sized non-zero value means on
  RDS_EXPECT_RC(SetRaw(s.get(), SOL_RDS, RDS_CONG_MONITOR, &mask, sizeof mask), 0);
  int off = 0;
  RDS_EXPECT_RC(SetRaw(s.get(), SOL_RDS, RDS_CONG_MONITOR, &off, sizeof off), 0);
}

// §A.7: "Turning it off clears the mask and any pending notification."
TEST(Sockopt, CongMonitorOffClearsAPendingNotification) {
  Fd s, r;
  uint16_t port = 0;
  ASSERT_NO_FATAL_FAILURE(MakeCongNotificationPending(&s, &r, &port));
  ASSERT_TRUE(SetInt(s.get(), SOL_RDS, RDS_CONG_MONITOR, 0));
  Received m = RecvOnce(s.get(), 16, MSG_DONTWAIT, 64);
  EXPECT_EQ(m.n, -1) << "notification survived RDS_CONG_MONITOR=0";
  EXPECT_EQ(m.err, EAGAIN);
}

// ---- SO_RDS_TRANSPORT (§A.7) -------------------------------------------------------------------------

TEST(Sockopt, SoRdsTransportOnUnboundSocketIsNone) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  int v[2] = {12345, 12345};
  socklen_t len = sizeof v;
  ASSERT_EQ(::getsockopt(s.get(), SOL_RDS, SO_RDS_TRANSPORT, v, &len), 0) << ErrnoName(errno);
  EXPECT_EQ(v[0], static_cast<int>(RDS_TRANS_NONE));
  EXPECT_EQ(len, 4u);
  EXPECT_EQ(v[1], 12345) << "wrote more than an int";
}

TEST(Sockopt, SoRdsTransportGetWithOptlenBelow4GivesEinval) {
  Fd s = Bound4();
  ASSERT_TRUE(s.ok());
  char v[4];
  socklen_t len = 2;
  RDS_EXPECT_ERRNO(::getsockopt(s.get(), SOL_RDS, SO_RDS_TRANSPORT, v, &len), EINVAL);
}

TEST(Sockopt, SoRdsTransportTcpCanBeSetBeforeBindAndReadBack) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(SetInt(s.get(), SOL_RDS, SO_RDS_TRANSPORT, RDS_TRANS_TCP));
  EXPECT_EQ(GetInt(s.get(), SOL_RDS, SO_RDS_TRANSPORT), RDS_TRANS_TCP);
}

// "A transport is already attached (for example, already bound) → EOPNOTSUPP."
TEST(Sockopt, SoRdsTransportSetTwiceGivesEopnotsupp) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(SetInt(s.get(), SOL_RDS, SO_RDS_TRANSPORT, RDS_TRANS_TCP));
  int tcp = RDS_TRANS_TCP;
  RDS_EXPECT_ERRNO(SetRaw(s.get(), SOL_RDS, SO_RDS_TRANSPORT, &tcp, sizeof tcp), EOPNOTSUPP);
}

TEST(Sockopt, SoRdsTransportAfterBindGivesEopnotsupp) {
  Fd s = Bound4();
  ASSERT_TRUE(s.ok());
  int tcp = RDS_TRANS_TCP;
  RDS_EXPECT_ERRNO(SetRaw(s.get(), SOL_RDS, SO_RDS_TRANSPORT, &tcp, sizeof tcp), EOPNOTSUPP);
  EXPECT_EQ(GetInt(s.get(), SOL_RDS, SO_RDS_TRANSPORT), kRdsTransLoop);
  // The attached check comes before the length check.
  RDS_EXPECT_ERRNO(SetRaw(s.get(), SOL_RDS, SO_RDS_TRANSPORT, &tcp, 2), EOPNOTSUPP);
}

TEST(Sockopt, SoRdsTransportWithOptlenNotFourGivesEinval) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  int64_t tcp = RDS_TRANS_TCP;
  RDS_EXPECT_ERRNO(SetRaw(s.get(), SOL_RDS, SO_RDS_TRANSPORT, &tcp, 2), EINVAL);
  RDS_EXPECT_ERRNO(SetRaw(s.get(), SOL_RDS, SO_RDS_TRANSPORT, &tcp, 8), EINVAL);
  EXPECT_EQ(GetInt(s.get(), SOL_RDS, SO_RDS_TRANSPORT), static_cast<int>(RDS_TRANS_NONE));
}

TEST(Sockopt, SoRdsTransportOutOfRangeGivesEinval) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  for (int v : {RDS_TRANS_COUNT, kRdsTransLoop, -1, 100}) {
    SCOPED_TRACE(v);
    RDS_EXPECT_ERRNO(SetRaw(s.get(), SOL_RDS, SO_RDS_TRANSPORT, &v, sizeof v), EINVAL);
  }
  EXPECT_EQ(GetInt(s.get(), SOL_RDS, SO_RDS_TRANSPORT), static_cast<int>(RDS_TRANS_NONE));
}

// IB (0) and the unused GAP slot (1) cannot be attached here.
//
// AMBIGUITY (reported): §A.7 says "The module cannot be obtained → ENOPROTOOPT. Value 1 ...
// always gives ENOPROTOOPT", but also "A non-TCP value in a non-initial netns → EPROTOTYPE",
// and that netns check runs *before* the module lookup (rds_set_transport, 6.12.117), so value 1
// in a non-initial netns gives EPROTOTYPE. Which one applies depends on whether the test runs
// in the initial netns, which a process cannot reliably tell; both are accepted. The
// transport stays unset either way.
TEST(Sockopt, SoRdsTransportIbOrGapIsRefused) {
  for (int v : {int{RDS_TRANS_IB}, int{RDS_TRANS_GAP}}) {
    SCOPED_TRACE(v);
    Fd s = RdsSocket();
    ASSERT_TRUE(s.ok());
    errno = 0;
    int rc = SetRaw(s.get(), SOL_RDS, SO_RDS_TRANSPORT, &v, sizeof v);
    int e = errno;
    EXPECT_EQ(rc, -1);
    EXPECT_TRUE(e == ENOPROTOOPT || e == EPROTOTYPE) << ErrnoName(e);
    EXPECT_EQ(GetInt(s.get(), SOL_RDS, SO_RDS_TRANSPORT), static_cast<int>(RDS_TRANS_NONE));
    // Nothing attached: TCP can still be chosen.
    EXPECT_TRUE(SetInt(s.get(), SOL_RDS, SO_RDS_TRANSPORT, RDS_TRANS_TCP));
  }
}

// ---- SO_RDS_MSG_RXPATH_LATENCY (§A.7) ------------------------------------------------------------------

TEST(Sockopt, RxpathLatencyWithValidTraceIsAccepted) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  rds_rx_trace_so t{};
  t.rx_traces = 3;
  t.rx_trace_pos[0] = 0;
  t.rx_trace_pos[1] = 1;
  t.rx_trace_pos[2] = 2;
  RDS_EXPECT_RC(SetRaw(s.get(), SOL_RDS, SO_RDS_MSG_RXPATH_LATENCY, &t, sizeof t), 0);
  t.rx_traces = 0;
  RDS_EXPECT_RC(SetRaw(s.get(), SOL_RDS, SO_RDS_MSG_RXPATH_LATENCY, &t, sizeof t), 0);
}

TEST(Sockopt, RxpathLatencyWithWrongOptlenGivesEfault) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  char buf[8] = {1, 0, 0, 0, 0, 0, 0, 0};
  RDS_EXPECT_ERRNO(SetRaw(s.get(), SOL_RDS, SO_RDS_MSG_RXPATH_LATENCY, buf, 3), EFAULT);
  RDS_EXPECT_ERRNO(SetRaw(s.get(), SOL_RDS, SO_RDS_MSG_RXPATH_LATENCY, buf, 8), EFAULT);
}

TEST(Sockopt, RxpathLatencyWithTooManyTracesGivesEfault) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  rds_rx_trace_so t{};
  t.rx_traces = 4;
  RDS_EXPECT_ERRNO(SetRaw(s.get(), SOL_RDS, SO_RDS_MSG_RXPATH_LATENCY, &t, sizeof t), EFAULT);
}

TEST(Sockopt, RxpathLatencyWithPositionOutOfRangeGivesEfault) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  rds_rx_trace_so t{};
  t.rx_traces = 2;
  t.rx_trace_pos[0] = 0;
  t.rx_trace_pos[1] = 3;
  RDS_EXPECT_ERRNO(SetRaw(s.get(), SOL_RDS, SO_RDS_MSG_RXPATH_LATENCY, &t, sizeof t), EFAULT);
}

// ---- RDS_INFO_* length negotiation (§A.8; COUNTERS and SOCKETS only) -------------------------------

// Probe with optlen 0: success returning the item size with optlen 0 (no items), or ENOSPC
// with optlen set to a multiple of the item size.
void ExpectProbeContract(int fd, int opt, int item) {
  socklen_t len = 0;
  errno = 0;
  int rc = ::getsockopt(fd, SOL_RDS, opt, nullptr, &len);
  int e = errno;
  if (rc >= 0) {
    EXPECT_EQ(rc, item);
    EXPECT_EQ(len, 0u);
  } else {
    EXPECT_EQ(e, ENOSPC) << ErrnoName(e);
    EXPECT_GT(len, 0u);
    EXPECT_EQ(len % item, 0u) << "optlen " << len << " is not a multiple of " << item;
  }
}

// A big enough buffer: returns the item size (positive) and sets optlen to the total.
socklen_t ExpectFullReadContract(int fd, int opt, int item) {
  std::vector<char> buf(1 << 20);
  socklen_t len = static_cast<socklen_t>(buf.size());
  errno = 0;
  int rc = ::getsockopt(fd, SOL_RDS, opt, buf.data(), &len);
  int e = errno;
  EXPECT_EQ(rc, item) << ErrnoName(e);
  EXPECT_LE(len, buf.size());
  EXPECT_EQ(len % item, 0u);
  return len;
}

TEST(Sockopt, InfoCountersProbeWithZeroLengthFollowsTheContract) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  ExpectProbeContract(s.get(), RDS_INFO_COUNTERS, sizeof(rds_info_counter));
}

TEST(Sockopt, InfoCountersWithBigBufferReturnsTheItemSizeAndTheTotal) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  socklen_t len = ExpectFullReadContract(s.get(), RDS_INFO_COUNTERS, sizeof(rds_info_counter));
  EXPECT_GT(len, 0u) << "no counters at all";
}

// A non-zero buffer that is too short: ENOSPC and the required length.
TEST(Sockopt, InfoCountersWithShortBufferGivesEnospcAndTheRequiredLength) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  std::vector<char> buf(1 << 20);
  socklen_t total = static_cast<socklen_t>(buf.size());
  ASSERT_EQ(::getsockopt(s.get(), SOL_RDS, RDS_INFO_COUNTERS, buf.data(), &total),
            static_cast<int>(sizeof(rds_info_counter)));
  if (total == 0) GTEST_SKIP() << "no counters";
  socklen_t len = total - 1;
  RDS_EXPECT_ERRNO(::getsockopt(s.get(), SOL_RDS, RDS_INFO_COUNTERS, buf.data(), &len), ENOSPC);
  EXPECT_EQ(len, total);
}

TEST(Sockopt, InfoSocketsProbeWithZeroLengthFollowsTheContract) {
  Fd s = Bound4();
  ASSERT_TRUE(s.ok());
  ExpectProbeContract(s.get(), RDS_INFO_SOCKETS, sizeof(rds_info_socket));
}

TEST(Sockopt, InfoSocketsWithBigBufferReturnsTheItemSizeAndTheTotal) {
  Fd s = Bound4();
  ASSERT_TRUE(s.ok());
  socklen_t len = ExpectFullReadContract(s.get(), RDS_INFO_SOCKETS, sizeof(rds_info_socket));
  EXPECT_GE(len, sizeof(rds_info_socket)) << "an IPv4-bound socket exists";
}

// "*optlen < 0 ... → EINVAL."
TEST(Sockopt, InfoWithNegativeOptlenGivesEinval) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  char buf[64];
  socklen_t len = static_cast<socklen_t>(-1);
  RDS_EXPECT_ERRNO(::getsockopt(s.get(), SOL_RDS, RDS_INFO_COUNTERS, buf, &len), EINVAL);
}

}  // namespace
}  // namespace rdstest
