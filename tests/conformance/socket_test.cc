// socket(AF_RDS, ...) — kernel-rds.md §A.1 (rds_create) plus the generic socket layer.
#include <sys/stat.h>

#include "tests/conformance/rds_test_util.h"

namespace rdstest {
namespace {

// §A.1: SOCK_SEQPACKET with protocol 0 is the only accepted combination.
TEST(Socket, SocketSeqpacketWithProtocolZeroSucceeds) {
  int fd = ::socket(AF_RDS, SOCK_SEQPACKET, 0);
  ASSERT_GE(fd, 0) << ErrnoName(errno);
  EXPECT_EQ(::close(fd), 0);
}

TEST(Socket, SocketPfRdsIsTheSameFamily) {
  int fd = ::socket(PF_RDS, SOCK_SEQPACKET, 0);
  ASSERT_GE(fd, 0) << ErrnoName(errno);
  EXPECT_EQ(GetInt(fd, SOL_SOCKET, SO_DOMAIN), AF_RDS);
  ::close(fd);
}

// §A.1: any other type gives ESOCKTNOSUPPORT.
// The generic socket layer: no fd left under RLIMIT_NOFILE gives EMFILE (get_unused_fd_flags),
// not a memory error.
TEST(Socket, SocketAtTheFdLimitGivesEmfile) {
  Fd warm = RdsSocket();  // the engine's own fds exist before the limit is reached
  ASSERT_TRUE(warm.ok());
  FdsExhausted none_left;
  RDS_EXPECT_ERRNO(::socket(AF_RDS, SOCK_SEQPACKET, 0), EMFILE);
  none_left.Free(4);
  Fd again(::socket(AF_RDS, SOCK_SEQPACKET, 0));
  EXPECT_TRUE(again.ok()) << ErrnoName(errno);
}

TEST(Socket, SocketStreamTypeGivesEsocktnosupport) {
  RDS_EXPECT_ERRNO(::socket(AF_RDS, SOCK_STREAM, 0), ESOCKTNOSUPPORT);
}

TEST(Socket, SocketDgramTypeGivesEsocktnosupport) {
  RDS_EXPECT_ERRNO(::socket(AF_RDS, SOCK_DGRAM, 0), ESOCKTNOSUPPORT);
}

TEST(Socket, SocketRawTypeGivesEsocktnosupport) {
  RDS_EXPECT_ERRNO(::socket(AF_RDS, SOCK_RAW, 0), ESOCKTNOSUPPORT);
}

TEST(Socket, SocketRdmTypeGivesEsocktnosupport) {
  RDS_EXPECT_ERRNO(::socket(AF_RDS, SOCK_RDM, 0), ESOCKTNOSUPPORT);
}

// §A.1: any non-zero protocol gives ESOCKTNOSUPPORT, even with the right type.
TEST(Socket, SocketNonZeroProtocolGivesEsocktnosupport) {
  for (int proto : {1, int{IPPROTO_TCP}, int{IPPROTO_UDP}, AF_RDS, 255}) {
    SCOPED_TRACE("protocol " + std::to_string(proto));
    RDS_EXPECT_ERRNO(::socket(AF_RDS, SOCK_SEQPACKET, proto), ESOCKTNOSUPPORT);
  }
}

TEST(Socket, SocketWrongTypeAndProtocolGivesEsocktnosupport) {
  RDS_EXPECT_ERRNO(::socket(AF_RDS, SOCK_STREAM, IPPROTO_TCP), ESOCKTNOSUPPORT);
}

// Generic layer (__sys_socket): flag bits other than SOCK_NONBLOCK/SOCK_CLOEXEC → EINVAL,
// before the family is consulted.
TEST(Socket, SocketUnknownTypeFlagBitsGiveEinval) {
  RDS_EXPECT_ERRNO(::socket(AF_RDS, SOCK_SEQPACKET | 0x100, 0), EINVAL);
}

// Generic layer (__sock_create): a type outside 0..SOCK_MAX-1 → EINVAL.
TEST(Socket, SocketTypeOutOfRangeGivesEinval) {
  RDS_EXPECT_ERRNO(::socket(AF_RDS, 15, 0), EINVAL);
}

// §A.1: "The generic layer strips SOCK_NONBLOCK/SOCK_CLOEXEC first" — so they work.
TEST(Socket, SocketSockNonblockMakesTheSocketNonblocking) {
  Fd s = RdsSocket(SOCK_NONBLOCK);
  ASSERT_TRUE(s.ok());
  int fl = fcntl(s.get(), F_GETFL);
  ASSERT_GE(fl, 0);
  EXPECT_TRUE(fl & O_NONBLOCK);
  char b[8];
  auto t0 = Clock::now();
  RDS_EXPECT_ERRNO(::recv(s.get(), b, sizeof b, 0), EAGAIN);
  EXPECT_LT(ElapsedMs(t0), 1000);
}

TEST(Socket, SocketSockCloexecSetsFdCloexec) {
  Fd s = RdsSocket(SOCK_CLOEXEC);
  ASSERT_TRUE(s.ok());
  int fdfl = fcntl(s.get(), F_GETFD);
  ASSERT_GE(fdfl, 0);
  EXPECT_TRUE(fdfl & FD_CLOEXEC);
}

TEST(Socket, SocketSockNonblockAndSockCloexecTogether) {
  Fd s = RdsSocket(SOCK_NONBLOCK | SOCK_CLOEXEC);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(fcntl(s.get(), F_GETFL) & O_NONBLOCK);
  EXPECT_TRUE(fcntl(s.get(), F_GETFD) & FD_CLOEXEC);
}

// Without flags: blocking (a receive waits for SO_RCVTIMEO and gives ETIMEDOUT, §A.5, rather
// than EAGAIN) and not close-on-exec; file mode O_RDWR like every socket.
TEST(Socket, SocketWithoutFlagsIsBlockingAndNotCloexec) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  int fl = fcntl(s.get(), F_GETFL);
  EXPECT_FALSE(fl & O_NONBLOCK);
  EXPECT_EQ(fl & O_ACCMODE, O_RDWR);
  EXPECT_FALSE(fcntl(s.get(), F_GETFD) & FD_CLOEXEC);
  ASSERT_TRUE(SetTimeoutMs(s.get(), SO_RCVTIMEO, 100));
  char b[8];
  RDS_EXPECT_ERRNO(::recv(s.get(), b, sizeof b, 0), ETIMEDOUT);
}

// §A.1: a new socket has no transport (SO_RDS_TRANSPORT reads RDS_TRANS_NONE, §A.7).
TEST(Socket, NewSocketHasNoTransport) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(GetInt(s.get(), SOL_RDS, SO_RDS_TRANSPORT), static_cast<int>(RDS_TRANS_NONE));
}

// §A.1 + §A.8b: not bound — getsockname gives AF_UNSPEC, length 16.
TEST(Socket, NewSocketIsNotBound) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  socklen_t len = 0;
  sockaddr_storage ss = LocalName(s.get(), &len);
  EXPECT_EQ(ss.ss_family, AF_UNSPEC);
  EXPECT_EQ(len, sizeof(sockaddr_in));
}

// §A.1 + §A.8b: not connected — getpeername gives ENOTCONN.
TEST(Socket, NewSocketIsNotConnected) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  RDS_EXPECT_ERRNO(::getpeername(s.get(), SA(&ss), &len), ENOTCONN);
}

// §A.1 + §A.9: TOS starts at 0.
TEST(Socket, NewSocketTosIsZero) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  rds_tos_t tos = 0x55;
  RDS_EXPECT_RC(::ioctl(s.get(), SIOCRDSGETTOS, &tos), 0);
  EXPECT_EQ(tos, 0);
}

// §A.1/§A.10 (as A.7 explains): sndbuf and rcvbuf start at net.core.{w,r}mem_default.
TEST(Socket, NewSocketBuffersAreTheGenericDefaults) {
  long wdef = ReadProcLong("/proc/sys/net/core/wmem_default");
  long rdef = ReadProcLong("/proc/sys/net/core/rmem_default");
  if (wdef <= 0 || rdef <= 0) GTEST_SKIP() << "/proc/sys/net/core not readable";
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(GetInt(s.get(), SOL_SOCKET, SO_SNDBUF), wdef);
  EXPECT_EQ(GetInt(s.get(), SOL_SOCKET, SO_RCVBUF), rdef);
}

// A socket is a file descriptor like any other: the lowest free number is used.
TEST(Socket, SocketReturnsTheLowestFreeDescriptor) {
  Fd a = RdsSocket();
  Fd b = RdsSocket();
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok());
  int freed = a.get();
  a.reset();
  // Nothing else in this process opens descriptors concurrently.
  Fd c = RdsSocket();
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c.get(), freed);
}

// An RDS socket is a socket: fstat reports S_ISSOCK (DESIGN.md §2.1 relies on the same).
TEST(Socket, SocketFstatReportsASocket) {
  Fd s = RdsSocket();
  ASSERT_TRUE(s.ok());
  struct stat st {};
  ASSERT_EQ(fstat(s.get(), &st), 0) << ErrnoName(errno);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
}

// Sockets are independent: binding one leaves another unbound.
TEST(Socket, SocketsAreIndependent) {
  Fd a = Bound4();
  Fd b = RdsSocket();
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(LocalName(b.get()).ss_family, AF_UNSPEC);
  EXPECT_NE(LocalPort(a.get()), 0);
}

}  // namespace
}  // namespace rdstest
