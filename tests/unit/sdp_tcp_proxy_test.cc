// Unit tests for sdp_relay/tcp_proxy.h: an "application" and a "far end"
// joined by the proxy over two real loopback TCP connections, stepped by hand.
#include "sdp_relay/tcp_proxy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "tests/unit/loopback_sockets.h"

namespace rds::sdp {
namespace {

using testing_util::LoopbackPair;
using testing_util::ReadSome;

class SdpTcpProxyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int a[2], b[2];
    LoopbackPair(a);
    LoopbackPair(b);
    app_ = a[0];
    far_ = b[0];
    proxy_ = std::make_unique<TcpProxy>(a[1], b[1], "proxy");
  }
  void TearDown() override {
    if (app_ >= 0) close(app_);
    if (far_ >= 0) close(far_);
  }
  void Step() {
    proxy_->OnEvent();
    usleep(200);
  }

  int app_ = -1, far_ = -1;
  std::unique_ptr<TcpProxy> proxy_;
};

TEST_F(SdpTcpProxyTest, BytesCrossBothWaysAndHalfClosesEndInOrder) {
  std::string out(3 << 20, '\0'), back(1 << 20, '\0');
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<char>(i * 7 % 251);
  for (size_t i = 0; i < back.size(); ++i) back[i] = static_cast<char>(i * 11 % 241);
  size_t sent_out = 0, sent_back = 0;
  std::string at_far, at_app;
  bool far_eof = false, app_eof = false;
  for (int i = 0; i < 20000 && !(far_eof && app_eof); ++i) {
    if (sent_out < out.size()) {
      const ssize_t n = send(app_, out.data() + sent_out, out.size() - sent_out, MSG_DONTWAIT);
      if (n > 0 && (sent_out += static_cast<size_t>(n)) == out.size()) shutdown(app_, SHUT_WR);
    }
    if (sent_back < back.size()) {
      const ssize_t n = send(far_, back.data() + sent_back, back.size() - sent_back, MSG_DONTWAIT);
      if (n > 0 && (sent_back += static_cast<size_t>(n)) == back.size()) shutdown(far_, SHUT_WR);
    }
    Step();
    at_far += ReadSome(far_, &far_eof);
    at_app += ReadSome(app_, &app_eof);
  }
  EXPECT_TRUE(at_far == out) << at_far.size() << " of " << out.size();
  EXPECT_TRUE(at_app == back) << at_app.size() << " of " << back.size();
  EXPECT_TRUE(far_eof && app_eof);
  EXPECT_TRUE(proxy_->done());
  EXPECT_FALSE(proxy_->reset());
}

TEST_F(SdpTcpProxyTest, UrgentDataStaysUrgent) {
  ASSERT_EQ(send(app_, "ab", 2, 0), 2);
  ASSERT_EQ(send(app_, "!", 1, MSG_OOB), 1);
  ASSERT_EQ(send(app_, "cd", 2, 0), 2);
  pollfd p{far_, POLLPRI, 0};
  for (int i = 0; i < 200; ++i) {
    Step();
    if (poll(&p, 1, 0) > 0) break;
  }
  ASSERT_TRUE(p.revents & POLLPRI);
  char buf[8];
  ASSERT_EQ(recv(far_, buf, sizeof buf, 0), 2);  // a read stops at the mark
  int at_mark = 0;
  ASSERT_EQ(ioctl(far_, SIOCATMARK, &at_mark), 0);
  EXPECT_EQ(at_mark, 1);
  ASSERT_EQ(recv(far_, buf, 1, MSG_OOB), 1);
  EXPECT_EQ(buf[0], '!');
  std::string rest;
  for (int i = 0; i < 50 && rest.size() < 2; ++i) {
    Step();
    rest += ReadSome(far_);
  }
  EXPECT_EQ(rest, "cd");
}

TEST_F(SdpTcpProxyTest, AResetOnOneSideResetsTheOther) {
  const linger abortive = {1, 0};
  ASSERT_EQ(setsockopt(far_, SOL_SOCKET, SO_LINGER, &abortive, sizeof abortive), 0);
  ASSERT_EQ(close(far_), 0);
  far_ = -1;
  int err = 0;
  for (int i = 0; i < 200 && err == 0; ++i) {
    Step();
    ReadSome(app_, nullptr, &err);
  }
  EXPECT_EQ(err, ECONNRESET);
  EXPECT_TRUE(proxy_->done());
  EXPECT_TRUE(proxy_->reset());
}

}  // namespace
}  // namespace rds::sdp
