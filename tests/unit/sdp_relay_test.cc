// Unit tests for sdp_relay/relay.h: two relays joined by an in-memory message
// channel, each with a real loopback TCP connection to its "application"
// socket, stepped by hand. What the applications see is checked with the
// calls a TCP program makes: bytes both ways, a reader that stops reading,
// half-close, urgent data, resets and protocol errors.
#include "sdp_relay/relay.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/loopback_sockets.h"

namespace rds::sdp {
namespace {

using testing_util::LoopbackPair;
using testing_util::ReadSome;
constexpr uint32_t kBufs = 8;
constexpr uint32_t kBufSize = 1040;  // 1 KiB of data a message: many messages

// One end of the in-memory connection: a bounded number of posted receive
// buffers, messages that arrive in order, a disconnect the other end hears.
class MemChannel : public MessageChannel {
 public:
  MemChannel* peer = nullptr;
  Relay* relay = nullptr;
  uint32_t posted = kBufs;
  size_t send_room = 1000;  // the send ring
  std::deque<std::vector<uint8_t>> arriving;
  std::map<uint64_t, std::vector<uint8_t>> held;  // given to the relay, not yet reposted
  uint64_t next_id = 1;
  bool disconnected = false;       // this end called Disconnect
  bool peer_disconnected = false;  // the other end did
  bool told_closed = false;

  bool CanSend() const override { return send_room > 0 && !disconnected && !peer_disconnected; }
  bool AllSent() const override { return true; }  // (delivered into the peer's queue at once)
  void Send(absl::Span<const uint8_t> m) override {
    EXPECT_TRUE(CanSend());
    // RC: a message with no receive buffer posted would be an RNR error.
    EXPECT_GT(peer->posted, 0u) << "sent beyond the peer's credits";
    if (peer->posted > 0) --peer->posted;
    peer->arriving.emplace_back(m.begin(), m.end());
  }
  void Repost(uint64_t id) override {
    EXPECT_EQ(held.erase(id), 1u) << "reposted a buffer it did not hold: " << id;
    ++posted;
  }
  void Disconnect() override {
    disconnected = true;
    peer->peer_disconnected = true;
  }
  // Hands what arrived to the relay; tells it of the peer's disconnect.
  void Deliver() {
    while (!arriving.empty() && relay != nullptr) {
      const uint64_t id = next_id++;
      std::vector<uint8_t>& m = held[id] = std::move(arriving.front());
      arriving.pop_front();
      relay->OnMessage(id, m);
    }
    if (peer_disconnected && !told_closed && relay != nullptr) {
      told_closed = true;
      relay->OnClosed(absl::OkStatus());
    }
  }
};


Conversation MakeConversation() {
  Conversation::Setup s;
  s.our_bufs = s.peer_bufs = kBufs;
  s.our_buf_size = s.peer_buf_size = kBufSize;
  return *Conversation::Create(s);
}

class SdpRelayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int a[2], b[2];
    LoopbackPair(a);
    LoopbackPair(b);
    // The relays' own sockets small, so that a stalled reader stalls its
    // writer within a few hundred kilobytes (not the megabytes autotuning gives).
    const int small = 65536;
    for (int fd : {a[1], b[1]}) {
      setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
      setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    }
    app_a_ = a[0];
    app_b_ = b[0];
    ch_a_.peer = &ch_b_;
    ch_b_.peer = &ch_a_;
    relay_a_ = std::make_unique<Relay>(a[1], MakeConversation(), &ch_a_, "relay A");
    relay_b_ = std::make_unique<Relay>(b[1], MakeConversation(), &ch_b_, "relay B");
    ch_a_.relay = relay_a_.get();
    ch_b_.relay = relay_b_.get();
  }
  void TearDown() override {
    if (app_a_ >= 0) close(app_a_);
    if (app_b_ >= 0) close(app_b_);
  }

  // One round of both relays' work (loopback needs a moment to move bytes).
  void Step() {
    for (int i = 0; i < 2; ++i) {
      ch_a_.Deliver();
      ch_b_.Deliver();
      if (!relay_a_->done()) relay_a_->OnLocalReadable();
      if (!relay_b_->done()) relay_b_->OnLocalReadable();
    }
    usleep(200);
  }
  static std::string Pattern(size_t n, int seed) {
    std::string s(n, '\0');
    for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + seed) % 251);
    return s;
  }

  int app_a_ = -1, app_b_ = -1;
  MemChannel ch_a_, ch_b_;
  std::unique_ptr<Relay> relay_a_, relay_b_;
};

TEST_F(SdpRelayTest, BytesCrossBothWaysInOrder) {
  const std::string to_b = Pattern(300 * 1024, 1), to_a = Pattern(200 * 1024, 2);
  size_t sent_b = 0, sent_a = 0;
  std::string got_b, got_a;
  for (int i = 0; i < 20000 && (got_b.size() < to_b.size() || got_a.size() < to_a.size()); ++i) {
    if (sent_b < to_b.size()) {
      const ssize_t n = send(app_a_, to_b.data() + sent_b, to_b.size() - sent_b, MSG_DONTWAIT);
      if (n > 0) sent_b += static_cast<size_t>(n);
    }
    if (sent_a < to_a.size()) {
      const ssize_t n = send(app_b_, to_a.data() + sent_a, to_a.size() - sent_a, MSG_DONTWAIT);
      if (n > 0) sent_a += static_cast<size_t>(n);
    }
    Step();
    got_b += ReadSome(app_b_);
    got_a += ReadSome(app_a_);
  }
  EXPECT_TRUE(got_b == to_b) << got_b.size() << " of " << to_b.size();
  EXPECT_TRUE(got_a == to_a) << got_a.size() << " of " << to_a.size();
  EXPECT_FALSE(relay_a_->done());
}

TEST_F(SdpRelayTest, AReaderThatStopsStopsTheWriterThroughCreditsAndNothingIsLost) {
  // B's application's receive buffer small too; A's application's socket
  // takes megabytes (autotuned) before its writer blocks.
  const int small = 16384;
  ASSERT_EQ(setsockopt(app_b_, SOL_SOCKET, SO_RCVBUF, &small, sizeof small), 0);
  const std::string data = Pattern(12 << 20, 3);
  size_t sent = 0;
  // B's application reads nothing: its socket fills, B's relay holds its
  // receive buffers, A's relay runs out of credits, A's sockets fill.
  auto stalled = [&] {
    return ch_b_.posted <= Conversation::kReservedCredits && ch_a_.arriving.empty() &&
           relay_a_->conversation().tx_credits() <=
               static_cast<int64_t>(Conversation::kReservedCredits);
  };
  for (int i = 0; i < 10000 && !stalled(); ++i) {
    const ssize_t n = send(app_a_, data.data() + sent, data.size() - sent, MSG_DONTWAIT);
    if (n > 0) sent += static_cast<size_t>(n);
    Step();
  }
  ASSERT_TRUE(stalled()) << "B's relay never held its receive buffers";
  for (int i = 0; i < 50; ++i) Step();  // and it stays so
  EXPECT_TRUE(stalled());
  EXPECT_EQ(send(app_a_, data.data() + sent, data.size() - sent, MSG_DONTWAIT) < 0 ? errno : 0,
            EAGAIN) << "the writer never blocked";
  // Reading resumes: everything arrives.
  std::string got;
  for (int i = 0; i < 100000 && got.size() < data.size(); ++i) {
    if (sent < data.size()) {
      const ssize_t n = send(app_a_, data.data() + sent, data.size() - sent, MSG_DONTWAIT);
      if (n > 0) sent += static_cast<size_t>(n);
    }
    Step();
    got += ReadSome(app_b_);
  }
  EXPECT_EQ(got.size(), data.size());
  EXPECT_TRUE(got == data);
}

TEST_F(SdpRelayTest, HalfCloseThenCloseEndsInOrder) {
  ASSERT_EQ(send(app_a_, "request", 7, 0), 7);
  ASSERT_EQ(shutdown(app_a_, SHUT_WR), 0);
  std::string got;
  bool eof = false;
  for (int i = 0; i < 200 && !eof; ++i) {
    Step();
    got += ReadSome(app_b_, &eof);
  }
  EXPECT_EQ(got, "request");
  ASSERT_TRUE(eof) << "B's application never saw A's FIN";
  EXPECT_TRUE(relay_a_->conversation().sent_disconn());
  // B answers on its half — more than A's buffers hold, so A, closed for
  // sending, must still grant credits — then closes.
  const std::string response = Pattern(64 * 1024, 9);
  size_t sent = 0;
  got.clear();
  eof = false;
  for (int i = 0; i < 2000 && !(eof && relay_a_->done() && relay_b_->done()); ++i) {
    if (sent < response.size()) {
      const ssize_t n = send(app_b_, response.data() + sent, response.size() - sent, MSG_DONTWAIT);
      if (n > 0) sent += static_cast<size_t>(n);
      if (sent == response.size()) {
        ASSERT_EQ(close(app_b_), 0);
        app_b_ = -1;
      }
    }
    Step();
    got += ReadSome(app_a_, &eof);
  }
  EXPECT_TRUE(got == response) << got.size() << " of " << response.size();
  EXPECT_TRUE(eof);
  EXPECT_TRUE(relay_a_->done());
  EXPECT_TRUE(relay_b_->done());
  EXPECT_TRUE(relay_a_->error().ok()) << relay_a_->error();
  EXPECT_TRUE(relay_b_->error().ok()) << relay_b_->error();
}

TEST_F(SdpRelayTest, FlushedOnlyOnceWhatTheApplicationWroteHasGoneWithItsEndOfFile) {
  EXPECT_TRUE(relay_a_->Flushed()) << "nothing written: nothing to wait for";
  // B's application does not read: A's data waits for credits, some of it
  // still unread at A's relay.
  const std::string data = Pattern(256 * 1024, 5);
  size_t sent = 0;
  for (int i = 0; i < 200; ++i) {
    const ssize_t n = send(app_a_, data.data() + sent, data.size() - sent, MSG_DONTWAIT);
    if (n > 0) sent += static_cast<size_t>(n);
    Step();
  }
  EXPECT_FALSE(relay_a_->Flushed()) << "data waits at A for B's credits";
  // The process ends: its end of file, then B reads everything.
  while (sent < data.size()) {
    const ssize_t n = send(app_a_, data.data() + sent, data.size() - sent, MSG_DONTWAIT);
    if (n > 0) sent += static_cast<size_t>(n);
    Step();
    ReadSome(app_b_);  // (draining: checked by the other tests)
  }
  ASSERT_EQ(shutdown(app_a_, SHUT_WR), 0);
  for (int i = 0; i < 2000 && !relay_a_->Flushed(); ++i) {
    Step();
    ReadSome(app_b_);
  }
  EXPECT_TRUE(relay_a_->Flushed());
  EXPECT_TRUE(relay_a_->conversation().sent_disconn()) << "flushed includes the end of file";
}

TEST_F(SdpRelayTest, UrgentDataKeepsItsMarkAndItsSignals) {
  ASSERT_EQ(send(app_a_, "abc", 3, 0), 3);
  ASSERT_EQ(send(app_a_, "!", 1, MSG_OOB), 1);
  ASSERT_EQ(send(app_a_, "def", 3, 0), 3);
  pollfd p{app_b_, POLLIN | POLLPRI, 0};
  for (int i = 0; i < 200; ++i) {
    Step();
    if (poll(&p, 1, 0) > 0 && (p.revents & POLLPRI)) break;
  }
  ASSERT_TRUE(p.revents & POLLPRI) << "no urgent data at B's application";
  char buf[16];
  // TCP: a read stops at the mark, then SIOCATMARK says the mark is next.
  ASSERT_EQ(recv(app_b_, buf, sizeof buf, 0), 3);
  EXPECT_EQ(std::string(buf, 3), "abc");
  int at_mark = 0;
  ASSERT_EQ(ioctl(app_b_, SIOCATMARK, &at_mark), 0);
  EXPECT_EQ(at_mark, 1);
  ASSERT_EQ(recv(app_b_, buf, 1, MSG_OOB), 1);
  EXPECT_EQ(buf[0], '!');
  std::string rest;
  for (int i = 0; i < 50 && rest.size() < 3; ++i) {
    Step();
    rest += ReadSome(app_b_);
  }
  EXPECT_EQ(rest, "def");
}

TEST_F(SdpRelayTest, AnAbortiveCloseResetsThePeersApplication) {
  ASSERT_EQ(send(app_a_, "x", 1, 0), 1);
  const linger abortive = {1, 0};
  ASSERT_EQ(setsockopt(app_a_, SOL_SOCKET, SO_LINGER, &abortive, sizeof abortive), 0);
  ASSERT_EQ(close(app_a_), 0);
  app_a_ = -1;
  int err = 0;
  for (int i = 0; i < 200 && err == 0; ++i) {
    Step();
    ReadSome(app_b_, nullptr, &err);
  }
  EXPECT_EQ(err, ECONNRESET);
  EXPECT_TRUE(relay_a_->done());
  EXPECT_TRUE(relay_b_->done());
  EXPECT_FALSE(relay_b_->error().ok());
}

TEST_F(SdpRelayTest, CloseWithUnreadDataResetsThePeer) {
  ASSERT_EQ(send(app_b_, "unread", 6, 0), 6);
  for (int i = 0; i < 20; ++i) Step();
  ASSERT_EQ(close(app_a_), 0);  // "unread" is in its receive queue: the kernel sends a RST
  app_a_ = -1;
  int err = 0;
  for (int i = 0; i < 200 && err == 0; ++i) {
    Step();
    ReadSome(app_b_, nullptr, &err);
  }
  EXPECT_EQ(err, ECONNRESET);
}

TEST_F(SdpRelayTest, AProtocolErrorResetsBothApplications) {
  std::vector<uint8_t> bogus(wire::kBsdhSize);
  wire::Bsdh h;
  h.mid = wire::kSrcAvail;  // zero copy: not spoken
  h.len = wire::kBsdhSize;
  h.mseq = 1;
  wire::EncodeBsdh(h, bogus.data());
  --ch_b_.posted;
  ch_b_.arriving.push_back(bogus);
  int err_a = 0, err_b = 0;
  for (int i = 0; i < 200 && (err_a == 0 || err_b == 0); ++i) {
    Step();
    ReadSome(app_a_, nullptr, &err_a);
    ReadSome(app_b_, nullptr, &err_b);
  }
  EXPECT_EQ(err_b, ECONNRESET);
  EXPECT_EQ(err_a, ECONNRESET);
  EXPECT_EQ(relay_b_->error().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rds::sdp
