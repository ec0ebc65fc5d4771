// Unit tests for sdp/ (which socket() calls are SDP and their errors, address
// families, the SDP-only options) and preload/sdp_fds (the table of SDP fds
// through dup, close and close_range).
#include <netinet/in.h>
#include <sys/socket.h>

#include <gtest/gtest.h>

#include <cerrno>

#include "preload/sdp_fds.h"
#include "sdp/sockaddr.h"
#include "sdp/socket_forms.h"
#include "sdp/sockopt.h"

namespace rds::sdp {
namespace {

TEST(SdpSocketForms, TheSpecificationsAndOfedsFormsMakeStreamSockets) {
  struct Case {
    int domain, type, protocol, family;
  } cases[] = {
      {AF_INET, SOCK_STREAM, kProtoSdp, AF_INET},
      {AF_INET6, SOCK_STREAM | SOCK_NONBLOCK, kProtoSdp, AF_INET6},
      {kAfInetSdp, SOCK_STREAM, 0, AF_INET},
      {kAfInetSdp, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP, AF_INET},
      {kAfInet6Sdp, SOCK_STREAM, 0, AF_INET6},
  };
  for (const Case& c : cases) {
    SocketForm f = ClassifySocketCall(c.domain, c.type, c.protocol);
    EXPECT_TRUE(f.sdp) << c.domain;
    EXPECT_EQ(f.error, 0) << c.domain;
    EXPECT_EQ(f.family, c.family) << c.domain;
    EXPECT_EQ(f.type, c.type) << "the caller's flags are kept";
  }
}

TEST(SdpSocketForms, OtherTypesAndProtocolsFailAsOfedsDid) {
  EXPECT_EQ(ClassifySocketCall(kAfInetSdp, SOCK_DGRAM, 0).error, ESOCKTNOSUPPORT);
  EXPECT_EQ(ClassifySocketCall(kAfInet6Sdp, SOCK_SEQPACKET, 0).error, ESOCKTNOSUPPORT);
  EXPECT_EQ(ClassifySocketCall(kAfInetSdp, SOCK_STREAM, IPPROTO_UDP).error, EPROTONOSUPPORT);
  EXPECT_EQ(ClassifySocketCall(AF_INET, SOCK_DGRAM, kProtoSdp).error, EPROTONOSUPPORT);
  EXPECT_EQ(ClassifySocketCall(kAfInetSdp, SOCK_STREAM | 0x100000, 0).error, EINVAL);
  EXPECT_EQ(ClassifySocketCall(kAfInetSdp, 12, 0).error, EINVAL);
}

TEST(SdpSocketForms, EverythingElseIsNotSdp) {
  EXPECT_FALSE(ClassifySocketCall(AF_INET, SOCK_STREAM, 0).sdp);
  EXPECT_FALSE(ClassifySocketCall(AF_INET6, SOCK_STREAM, IPPROTO_TCP).sdp);
  EXPECT_FALSE(ClassifySocketCall(AF_UNIX, SOCK_STREAM, kProtoSdp).sdp);
  EXPECT_FALSE(ClassifySocketCall(21 /*AF_RDS*/, SOCK_SEQPACKET, 0).sdp);
}

TEST(SdpSockaddr, Families27And28BecomeTheKernels) {
  sockaddr_storage ss = {};
  ss.ss_family = kAfInetSdp;
  EXPECT_TRUE(HasSdpFamily(ss.ss_family));
  ToKernelFamily(&ss);
  EXPECT_EQ(ss.ss_family, AF_INET);
  ss.ss_family = kAfInet6Sdp;
  ToKernelFamily(&ss);
  EXPECT_EQ(ss.ss_family, AF_INET6);
  ss.ss_family = AF_UNIX;
  EXPECT_FALSE(HasSdpFamily(ss.ss_family));
  ToKernelFamily(&ss);
  EXPECT_EQ(ss.ss_family, AF_UNIX);
}

TEST(SdpSockopt, ZeroCopyThresholdIsStoredAndLastBindErrorReadOnly) {
  SdpOptions opts;
  int out = -1;
  OptionCall c = GetOption(opts, IPPROTO_TCP, kSdpZcopyThresh, &out);
  EXPECT_EQ(c.kind, OptionCall::Kind::kAnswered);
  EXPECT_EQ(out, kDefaultZcopyThresh);
  int v = 4096;
  c = SetOption(opts, IPPROTO_TCP, kSdpZcopyThresh, &v, sizeof(v));
  EXPECT_EQ(c.kind, OptionCall::Kind::kAnswered);
  EXPECT_EQ(c.error, 0);
  EXPECT_EQ(opts.zcopy_thresh, 4096);
  EXPECT_EQ(SetOption(opts, IPPROTO_TCP, kSdpZcopyThresh, &v, 2).error, EINVAL);
  v = -1;
  EXPECT_EQ(SetOption(opts, IPPROTO_TCP, kSdpZcopyThresh, &v, sizeof(v)).error, EINVAL);
  EXPECT_EQ(SetOption(opts, IPPROTO_TCP, kSdpLastBindErr, &v, sizeof(v)).error, ENOPROTOOPT);
  opts.last_bind_err = -EADDRNOTAVAIL;
  c = GetOption(opts, IPPROTO_TCP, kSdpLastBindErr, &out);
  EXPECT_EQ(c.kind, OptionCall::Kind::kAnswered);
  EXPECT_EQ(out, -EADDRNOTAVAIL);
}

TEST(SdpSockopt, KeepaliveAtLevel27IsSolSocketsAndTheRestTheKernels) {
  SdpOptions opts;
  int v = 1, out = 0;
  OptionCall c = SetOption(opts, kAfInetSdp, SO_KEEPALIVE, &v, sizeof(v));
  EXPECT_EQ(c.kind, OptionCall::Kind::kKernelAs);
  EXPECT_EQ(c.level, SOL_SOCKET);
  EXPECT_EQ(c.name, SO_KEEPALIVE);
  EXPECT_EQ(GetOption(opts, kAfInetSdp, SO_KEEPALIVE, &out).kind, OptionCall::Kind::kKernelAs);
  EXPECT_EQ(SetOption(opts, kAfInetSdp, SO_DEBUG, &v, sizeof(v)).error, ENOPROTOOPT);
  EXPECT_EQ(SetOption(opts, IPPROTO_TCP, 1 /*TCP_NODELAY*/, &v, sizeof(v)).kind,
            OptionCall::Kind::kKernel);
  EXPECT_EQ(GetOption(opts, SOL_SOCKET, SO_LINGER, &out).kind, OptionCall::Kind::kKernel);
}

}  // namespace
}  // namespace rds::sdp

namespace rds::preload::sdp_fds {
namespace {

// fd numbers far above any this test process opens: the table is only a map.
constexpr int kBase = 1 << 20;

TEST(SdpFds, DupsShareTheEntryAcrossTheTablesGrowth) {
  for (int i = 0; i < 200; ++i) Mark(kBase + i, std::make_shared<SdpFd>(AF_INET));
  // Each copy inserts: the table grows while entries are copied (a copy that
  // read its source after inserting once lost the entry).
  for (int i = 0; i < 200; ++i) Duplicate(kBase + i, kBase + 1000 + i);
  for (int i = 0; i < 200; ++i) {
    ASSERT_NE(Find(kBase + 1000 + i), nullptr) << i;
    EXPECT_EQ(Find(kBase + 1000 + i), Find(kBase + i)) << "one socket, one entry";
  }
  Forget(kBase);
  EXPECT_EQ(Find(kBase), nullptr);
  EXPECT_NE(Find(kBase + 1000), nullptr) << "the dup keeps it";
  Duplicate(kBase + 5000, kBase + 1001);  // a non-SDP fd dup2'ed over an SDP one
  EXPECT_EQ(Find(kBase + 1001), nullptr);
  ForgetRange(kBase, kBase + 2000);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(Find(kBase + 1000 + i), nullptr);
}

}  // namespace
}  // namespace rds::preload::sdp_fds
