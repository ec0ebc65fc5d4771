// Unit tests for transports/stream/stream_link over a Unix socketpair: large
// arena payloads cross by reference (only the header is written) and come
// back to the arena when the receiver lets go; forged shared-payload frames
// drop the link. Over loopback TCP: large payloads are spliced into the socket
// and arrive intact, in order, between copied ones, even when the socket is
// full mid-payload.
#include "transports/stream/stream_link.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "engine/control.h"
#include "engine/stats.h"
#include "engine/sync.h"
#include "engine/sys.h"
#include "transports/tcp/tcp_transport.h"

namespace rds {
namespace {

constexpr absl::Duration kPatience = absl::Seconds(10);

// Waits (bounded) until `done` holds.
template <typename F>
bool Eventually(F done) {
  const absl::Time end = absl::Now() + kPatience;
  while (!done()) {
    if (absl::Now() > end) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

// An event loop on its own thread and a connected AF_UNIX socketpair: link
// `a` on one end and, unless `raw_peer`, link `b` on the other (else the test
// writes the other end itself).
class LinkPairTest : public ::testing::Test {
 protected:
  void Start(bool raw_peer) {
    int fds[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
    thread_ = std::thread([this] { loop_.Run(); });
    OnLoop([&] {
      a_ = StreamLink::Create(loop_, sys::MakeInternal(fds[0]), false, false, "a");
      a_->SetCallbacks(Callbacks(&a_closed_, nullptr));
      if (raw_peer) {
        raw_ = fds[1];
      } else {
        b_ = StreamLink::Create(loop_, sys::MakeInternal(fds[1]), false, false, "b");
        b_->SetCallbacks(Callbacks(&b_closed_, &b_got_));
      }
    });
  }

  // The same over a loopback TCP connection (a link to "another host"), with
  // a small send buffer on a's side, so that writes stop mid-payload. With
  // `raw_client`, the test writes a's end itself (blocking).
  void StartTcp(bool raw_client = false) {
    int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(listener, 0);
    sockaddr_in addr = {};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), len), 0);
    ASSERT_EQ(listen(listener, 1), 0);
    ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    int client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(client, 0);
    const int small = 256 << 10;  // (much less stalls on delayed ACKs at loopback MSS)
    ASSERT_EQ(setsockopt(client, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
    const int on = 1;
    ASSERT_EQ(setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on)), 0);
    ASSERT_EQ(connect(client, reinterpret_cast<sockaddr*>(&addr), len), 0);
    int server = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    ASSERT_GE(server, 0);
    close(listener);
    if (raw_client) {
      raw_ = client;
    } else {
      ASSERT_EQ(fcntl(client, F_SETFL, O_NONBLOCK), 0);
    }
    thread_ = std::thread([this] { loop_.Run(); });
    OnLoop([&] {
      if (!raw_client) {
        a_ = StreamLink::Create(loop_, sys::MakeInternal(client), false, false, "a-tcp");
        a_->SetCallbacks(Callbacks(&a_closed_, nullptr));
      }
      server_ = sys::MakeInternal(server);  // (the fd may move)
      b_ = StreamLink::Create(loop_, server_, false, false, "b-tcp");
      b_->SetCallbacks(Callbacks(&b_closed_, &b_got_));
    });
  }

  void TearDown() override {
    if (!thread_.joinable()) return;
    OnLoop([&] {
      if (a_) a_->Close();
      if (b_) b_->Close();
      a_.reset();
      b_.reset();
    });
    loop_.Stop();
    thread_.join();
    if (raw_ >= 0) close(raw_);
  }

  struct Got {
    wire::Header header;
    Payload payload;
  };

  Link::Callbacks Callbacks(std::atomic<bool>* closed, std::vector<Got>* got) {
    Link::Callbacks cb;
    cb.on_message = [this, got](wire::Header&& h, Payload&& p) {
      if (!got) return;
      rds::MutexLock lock(&mu_);
      got->push_back({h, std::move(p)});
    };
    cb.on_closed = [closed](const absl::Status&) { closed->store(true); };
    return cb;
  }

  // Runs fn on the loop thread (with the run lock, as links require).
  void OnLoop(const std::function<void()>& fn) {
    Notification done;
    loop_.Post([&] {
      fn();
      done.Notify();
    });
    done.WaitForNotification();
  }

  size_t Received() {
    rds::MutexLock lock(&mu_);
    return b_got_.size();
  }

  static MessagePtr Message(uint16_t dport, Payload payload) {
    MessagePtr m = NewMessage();
    for (size_t i = 0; i < payload.size(); ++i) payload.data()[i] = static_cast<uint8_t>(i * 31 + dport);
    m->header.sport = 7;
    m->header.dport = dport;
    m->header.len = static_cast<uint32_t>(payload.size());
    m->payload = std::move(payload);
    return m;
  }

  static bool Intact(const Got& g) {
    if (g.header.len != g.payload.size()) return false;
    for (size_t i = 0; i < g.payload.size(); ++i) {
      if (g.payload.data()[i] != static_cast<uint8_t>(i * 31 + g.header.dport)) return false;
    }
    return true;
  }

  // Writes all of `bytes` to the raw end.
  void WriteAll(const uint8_t* bytes, size_t n) {
    while (n > 0) {
      const ssize_t w = write(raw_, bytes, n);
      ASSERT_GT(w, 0);
      bytes += w;
      n -= static_cast<size_t>(w);
    }
  }

  // The wake-up threshold (SO_RCVLOWAT) of b's socket.
  int ServerRcvLowat() {
    int v = -1;
    socklen_t len = sizeof(v);
    EXPECT_EQ(getsockopt(server_, SOL_SOCKET, SO_RCVLOWAT, &v, &len), 0);
    return v;
  }

  // A message as it goes on the stream: header, then payload.
  static std::vector<uint8_t> Wire(const MessagePtr& m) {
    std::vector<uint8_t> bytes(wire::kHeaderSize + m->payload.size());
    wire::Encode(m->header, bytes.data());
    if (m->payload.size()) std::memcpy(bytes.data() + wire::kHeaderSize, m->payload.data(), m->payload.size());
    return bytes;
  }

  void WriteRaw(const MessagePtr& m) {
    const std::vector<uint8_t> bytes = Wire(m);
    ASSERT_EQ(write(raw_, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  }

  EventLoop loop_;
  std::thread thread_;
  std::shared_ptr<StreamLink> a_, b_;
  int raw_ = -1;
  int server_ = -1;  // b's socket (StartTcp)
  std::atomic<bool> a_closed_{false}, b_closed_{false};
  rds::Mutex mu_;
  std::vector<Got> b_got_ ABSL_GUARDED_BY(mu_);
};

TEST_F(LinkPairTest, ArenaPayloadsCrossByReferenceOthersByCopy) {
  std::shared_ptr<ShmArena> arena = ShmArena::Get();
  ASSERT_TRUE(arena) << "the process arena (RDS_PRELOAD_SHM_ARENA_MB defaults to 32)";
  Start(false);
  ASSERT_TRUE(a_->shares_payloads());
  const size_t in_use = arena->GetUsage().blocks_in_use;
  const uint64_t sent0 = stats::Get(stats::kShimShmPayloadsSent);
  const uint64_t recv0 = stats::Get(stats::kShimShmPayloadsReceived);
  std::optional<Payload> shared = arena->Allocate(300 * 1024);
  ASSERT_TRUE(shared);
  MessagePtr big = Message(1, std::move(*shared));
  MessagePtr small = Message(2, Payload(1000));
  MessagePtr copied = Message(3, Payload(200 * 1024));  // large, but not from the arena
  OnLoop([&] {
    a_->Send(big);
    a_->Send(small);
    a_->Send(copied);
  });
  ASSERT_TRUE(Eventually([&] { return Received() == 3; }));
  {
    rds::MutexLock lock(&mu_);
    for (const Got& g : b_got_) EXPECT_TRUE(Intact(g)) << "dport " << g.header.dport;
    EXPECT_NE(b_got_[0].payload.owner(), nullptr) << "borrowed from the peer's arena";
    EXPECT_FALSE(wire::ParseExtHeaders(b_got_[0].header).shim_payload_ref) << "stripped";
    EXPECT_EQ(b_got_[1].payload.owner(), nullptr);
    EXPECT_EQ(b_got_[2].payload.owner(), nullptr);
  }
  EXPECT_EQ(stats::Get(stats::kShimShmPayloadsSent) - sent0, 1u);
  EXPECT_EQ(stats::Get(stats::kShimShmPayloadsReceived) - recv0, 1u);
  // The sender lets go (acknowledged): the peer still holds the block.
  big.reset();
  EXPECT_EQ(arena->GetUsage().blocks_in_use, in_use + 1);
  // The receiver lets go: the release travels back and the block is free.
  {
    rds::MutexLock lock(&mu_);
    b_got_.clear();
  }
  EXPECT_TRUE(Eventually([&] { return arena->GetUsage().blocks_in_use == in_use; }));
  EXPECT_FALSE(a_closed_.load());
  EXPECT_FALSE(b_closed_.load());
}

TEST_F(LinkPairTest, BlocksHeldWhenTheLinkDiesComeBackOverTheNextLink) {
  std::shared_ptr<ShmArena> arena = ShmArena::Get();
  ASSERT_TRUE(arena);
  Start(false);
  const ShmArena::Usage before = arena->GetUsage();
  std::optional<Payload> shared = arena->Allocate(ShmArena::kMaxBlock);
  ASSERT_TRUE(shared);
  OnLoop([&] { a_->Send(Message(9, std::move(*shared))); });
  ASSERT_TRUE(Eventually([&] { return Received() == 1; }));
  std::vector<Got> held;
  {
    rds::MutexLock lock(&mu_);
    held.swap(b_got_);
  }
  OnLoop([&] {
    a_->Close();
    b_->Close();
  });
  // The receiver (this process) still holds the payload: the block stays lent.
  EXPECT_EQ(arena->LentTo(getpid()), 1u);
  EXPECT_TRUE(Intact(held[0])) << "still readable after the link closed";
  held.clear();  // released while no link is up: the release waits
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(arena->GetUsage().blocks_in_use, before.blocks_in_use + 1);
  // A new link to the same process: the sender announces its arena again,
  // the receiver recognises it and sends the waiting release.
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
  OnLoop([&] {
    a_ = StreamLink::Create(loop_, sys::MakeInternal(fds[0]), false, false, "a2");
    a_->SetCallbacks(Callbacks(&a_closed_, nullptr));
    b_ = StreamLink::Create(loop_, sys::MakeInternal(fds[1]), false, false, "b2");
    b_->SetCallbacks(Callbacks(&b_closed_, &b_got_));
  });
  EXPECT_TRUE(Eventually([&] { return arena->GetUsage().blocks_in_use == before.blocks_in_use; }));
  EXPECT_EQ(arena->LentTo(getpid()), 0u);
  EXPECT_FALSE(a_closed_.load());
}

TEST_F(LinkPairTest, LargePayloadsToAnotherHostGoIntoTheSocketByReference) {
  StartTcp();
  const uint64_t spliced0 = stats::Get(stats::kShimTcpPayloadsSpliced);
  const uint64_t full0 = stats::Get(stats::kTcpSndbufFull);
  // Payloads of 64 KiB and more are spliced (RDS_PRELOAD_TCP_SPLICE_MIN_KB
  // defaults to 64); the others are copied, into the same stream.
  const std::vector<size_t> sizes = {1 << 20, 1000, 200 << 10, 64 << 10, 0, 1 << 20, 65535, 777 << 10};
  std::vector<MessagePtr> sent;
  size_t expect_spliced = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    sent.push_back(Message(static_cast<uint16_t>(i + 1), Payload(sizes[i])));
    if (sizes[i] >= (64 << 10)) ++expect_spliced;
  }
  OnLoop([&] {
    for (const MessagePtr& m : sent) a_->Send(m);
  });
  ASSERT_TRUE(Eventually([&] { return Received() == sizes.size(); }));
  {
    rds::MutexLock lock(&mu_);
    for (size_t i = 0; i < sizes.size(); ++i) {
      EXPECT_EQ(b_got_[i].header.dport, i + 1) << "in order";
      EXPECT_TRUE(Intact(b_got_[i])) << "message " << i << " of " << sizes[i] << " bytes";
    }
  }
  EXPECT_EQ(stats::Get(stats::kShimTcpPayloadsSpliced) - spliced0, expect_spliced);
  EXPECT_GT(stats::Get(stats::kTcpSndbufFull) - full0, 0u) << "writes stopped mid-stream";
  // Never acknowledged here: the spliced ones keep the flag that makes their
  // storage abandoned (not reused under the kernel) when they are freed.
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(sent[i]->payload_on_loan.load(), sizes[i] >= (64 << 10)) << "message " << i;
  }
  EXPECT_FALSE(a_closed_.load());
  EXPECT_FALSE(b_closed_.load());
}

// A link waiting for more of a large payload asks the kernel to wake it only
// once 256 KiB more (or the rest, if less is missing) has arrived, not at every
// segment; between messages, and for small ones, every byte wakes it again.
// (How much the reader has taken when it is woken depends on timing: only the
// thresholds that do not are checked.)
TEST_F(LinkPairTest, AReaderOfALargePayloadIsWokenForItsNextPieceOnly) {
  StartTcp(/*raw_client=*/true);
  const uint64_t waits0 = stats::Get(stats::kShimTcpWaitsForPayload);
  EXPECT_EQ(ServerRcvLowat(), 1);
  const std::vector<uint8_t> bytes = Wire(Message(1, Payload(1 << 20)));
  // The header and 100 KiB: at least 924 KiB missing, woken for the next 256 KiB.
  const size_t first = wire::kHeaderSize + (100 << 10);
  WriteAll(bytes.data(), first);
  EXPECT_TRUE(Eventually([&] { return ServerRcvLowat() == (256 << 10); }))
      << "threshold " << ServerRcvLowat();
  EXPECT_EQ(Received(), 0u);
  WriteAll(bytes.data() + first, bytes.size() - first);
  ASSERT_TRUE(Eventually([&] { return Received() == 1; }));
  EXPECT_EQ(ServerRcvLowat(), 1) << "between messages";
  // A small message, then the header of a large one alone: each is read at
  // once (a threshold left over would leave them unread); then that payload,
  // shorter than 256 KiB, wakes the reader when all of it is there.
  WriteRaw(Message(2, Payload(100)));
  ASSERT_TRUE(Eventually([&] { return Received() == 2; }));
  EXPECT_EQ(ServerRcvLowat(), 1);
  const std::vector<uint8_t> bytes2 = Wire(Message(3, Payload(200 << 10)));
  WriteAll(bytes2.data(), wire::kHeaderSize);
  EXPECT_TRUE(Eventually([&] { return ServerRcvLowat() == (200 << 10); }))
      << "threshold " << ServerRcvLowat();
  WriteAll(bytes2.data() + wire::kHeaderSize, bytes2.size() - wire::kHeaderSize);
  ASSERT_TRUE(Eventually([&] { return Received() == 3; }));
  {
    rds::MutexLock lock(&mu_);
    for (const Got& g : b_got_) EXPECT_TRUE(Intact(g)) << "message to port " << g.header.dport;
  }
  EXPECT_EQ(ServerRcvLowat(), 1);
  EXPECT_GE(stats::Get(stats::kShimTcpWaitsForPayload) - waits0, 2u);
  EXPECT_FALSE(b_closed_.load());
}

// A peer that goes away mid-payload, while the reader waits for 256 KiB more,
// still ends the link at once: the end of a connection wakes a reader whatever
// its threshold.
TEST_F(LinkPairTest, APeerClosingMidPayloadEndsTheLinkDespiteTheThreshold) {
  StartTcp(/*raw_client=*/true);
  const std::vector<uint8_t> bytes = Wire(Message(1, Payload(1 << 20)));
  WriteAll(bytes.data(), wire::kHeaderSize + (100 << 10));
  ASSERT_TRUE(Eventually([&] { return ServerRcvLowat() == (256 << 10); }))
      << "threshold " << ServerRcvLowat();
  ASSERT_EQ(shutdown(raw_, SHUT_WR), 0);
  EXPECT_TRUE(Eventually([&] { return b_closed_.load(); })) << "the link must end";
  EXPECT_EQ(Received(), 0u);
}

// A kernel node's poke: a connection its peer resets before the engine takes
// it from the listener. The engine still learns where it came from (which
// node poked: kernel-rds.md §C.7); the socket itself no longer knows.
TEST_F(LinkPairTest, AnAcceptedConnectionResetBeforeAcceptKeepsItsAddresses) {
  int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), len), 0);
  ASSERT_EQ(listen(listener, 4), 0);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  int client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(client, 0);
  ASSERT_EQ(connect(client, reinterpret_cast<sockaddr*>(&addr), len), 0);
  sockaddr_in client_addr = {};
  socklen_t client_len = sizeof(client_addr);
  ASSERT_EQ(getsockname(client, reinterpret_cast<sockaddr*>(&client_addr), &client_len), 0);
  const linger reset = {1, 0};
  ASSERT_EQ(setsockopt(client, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset)), 0);
  close(client);  // a reset, while the connection waits in the accept queue
  absl::SleepFor(absl::Milliseconds(50));
  thread_ = std::thread([this] { loop_.Run(); });
  std::shared_ptr<Link> accepted;
  OnLoop([&] { accepted = AcceptTcpLink(loop_, listener); });
  close(listener);
  ASSERT_NE(accepted, nullptr);
  std::optional<Link::Endpoints> e = accepted->endpoints();
  ASSERT_TRUE(e.has_value()) << "the poke's addresses are lost";
  EXPECT_EQ(e->peer.port, ntohs(client_addr.sin_port));
  EXPECT_EQ(e->local.port, ntohs(addr.sin_port));
  EXPECT_EQ(e->peer.addr.ToString(), "127.0.0.1");
  OnLoop([&] {
    accepted->Close();
    accepted.reset();
  });
}

// A connect the peer never answers (its SYN dropped: here a listener whose
// accept queue is full) fails at the deadline with DeadlineExceeded — not at
// the kernel's SYN back-off — and is reported through on_closed.
TEST_F(LinkPairTest, AConnectWithoutAnswerFailsAtItsDeadline) {
  int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), len), 0);
  ASSERT_EQ(listen(listener, 0), 0);  // room for one unaccepted connection
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  int first = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(first, 0);
  ASSERT_EQ(connect(first, reinterpret_cast<sockaddr*>(&addr), len), 0);  // fills the queue
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  ASSERT_GE(fd, 0);
  ASSERT_NE(connect(fd, reinterpret_cast<sockaddr*>(&addr), len), 0);
  ASSERT_EQ(errno, EINPROGRESS);
  thread_ = std::thread([this] { loop_.Run(); });
  std::atomic<bool> closed{false};
  absl::Status why;
  const absl::Time start = absl::Now();
  OnLoop([&] {
    a_ = StreamLink::Create(loop_, sys::MakeInternal(fd), /*connecting=*/true, false, "unanswered");
    Link::Callbacks cb;
    cb.on_closed = [&](const absl::Status& s) {
      why = s;
      closed.store(true);
    };
    a_->SetCallbacks(std::move(cb));
    a_->ArmConnectDeadline(absl::Milliseconds(300));
  });
  absl::SleepFor(absl::Milliseconds(100));
  bool awaiting = false;
  OnLoop([&] { awaiting = a_->AwaitingConnect(); });
  EXPECT_TRUE(awaiting);
  EXPECT_FALSE(closed.load());
  ASSERT_TRUE(Eventually([&] { return closed.load(); }));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(300));
  EXPECT_TRUE(absl::IsDeadlineExceeded(why)) << why;
  OnLoop([&] { awaiting = a_->AwaitingConnect(); });
  EXPECT_FALSE(awaiting);
  close(first);
  close(listener);
}

// A kernel node's connection handed on mid-message (an image that ends
// passes it to the next process): the reader stops with a message read in
// part; a link over a duplicate of the socket, given those bytes back, reads
// on — the message arrives whole there, and the next one too, and the peer
// never notices.
TEST_F(LinkPairTest, AStreamHandedOnMidMessageIsReadOnByTheNextLink) {
  StartTcp(/*raw_client=*/true);
  const std::vector<uint8_t> first = Wire(Message(1, Payload(100)));
  const std::vector<uint8_t> second = Wire(Message(2, Payload(5000)));
  WriteAll(first.data(), first.size());
  const size_t cut = wire::kHeaderSize + 1000;
  WriteAll(second.data(), cut);
  // All of it read: one message delivered, the second begun.
  ASSERT_TRUE(Eventually([&] {
    int inq = -1;
    return ioctl(server_, FIONREAD, &inq) == 0 && inq == 0 && Received() == 1;
  }));
  std::shared_ptr<StreamLink> next;
  OnLoop([&] {
    absl::StatusOr<Link::Detached> d = b_->DetachForHandOn(absl::Seconds(1));
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->partial, std::vector<uint8_t>(second.begin(), second.begin() + cut));
    b_->Close();  // its descriptor only
    b_.reset();
    next = StreamLink::Create(loop_, d->fd, false, false, "next");
    next->SetCallbacks(Callbacks(&b_closed_, &b_got_));
    ASSERT_TRUE(next->RestoreInput(d->partial).ok());
  });
  WriteAll(second.data() + cut, second.size() - cut);
  WriteRaw(Message(3, Payload(10)));
  EXPECT_TRUE(Eventually([&] { return Received() == 3; })) << Received();
  {
    rds::MutexLock lock(&mu_);
    for (size_t i = 0; i < b_got_.size(); ++i) {
      EXPECT_EQ(b_got_[i].header.dport, i + 1);
      EXPECT_TRUE(Intact(b_got_[i])) << "message to port " << b_got_[i].header.dport;
    }
  }
  EXPECT_FALSE(b_closed_.load());
  OnLoop([&] {
    if (next) next->Close();
  });
}

// The writing side handed on: a large message being written when the image
// ends is finished first (its rest would otherwise never follow its start),
// and the next link's messages follow it on the same connection. (The peer
// reads on a thread of its own, as a node does.)
TEST_F(LinkPairTest, AStreamHandedOnMidWriteFinishesTheMessageFirst) {
  StartTcp(/*raw_client=*/true);
  // The roles turn: the test's raw end reads, link b writes.
  std::vector<Got> got;
  std::atomic<bool> reading{false};
  std::thread reader([&] {
    ASSERT_TRUE(Eventually([&] { return reading.load(); }));
    Reassembler r;
    std::vector<uint8_t> buf(64 << 10);
    const absl::Time end = absl::Now() + kPatience;
    while (got.size() < 2 && absl::Now() < end) {
      const ssize_t n = read(raw_, buf.data(), buf.size());
      if (n <= 0) break;
      ASSERT_TRUE(r.Feed({buf.data(), static_cast<size_t>(n)}, [&](wire::Header&& h, Payload&& p) {
        got.push_back({h, std::move(p)});
      }).ok());
    }
  });
  const int small = 64 << 10;
  ASSERT_EQ(setsockopt(server_, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
  ASSERT_EQ(setsockopt(raw_, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
  const timeval patience = {10, 0};  // kPatience: a stream cut mid-message ends the reader
  ASSERT_EQ(setsockopt(raw_, SOL_SOCKET, SO_RCVTIMEO, &patience, sizeof(patience)), 0);
  std::shared_ptr<StreamLink> next;
  OnLoop([&] {
    b_->Send(Message(1, Payload(1 << 20)));  // far beyond what the sockets hold
    loop_.Defer([&] {
      // After the first writes: b's socket is full mid-payload (the peer
      // reads from now on).
      reading.store(true);
      absl::StatusOr<Link::Detached> d = b_->DetachForHandOn(absl::Seconds(8));
      ASSERT_TRUE(d.ok()) << d.status();
      EXPECT_TRUE(d->partial.empty());
      b_->Close();
      b_.reset();
      next = StreamLink::Create(loop_, d->fd, false, false, "next");
      next->SetCallbacks(Callbacks(&b_closed_, nullptr));
      next->Send(Message(2, Payload(300)));
    });
  });
  reader.join();
  ASSERT_EQ(got.size(), 2u);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].header.dport, i + 1);
    EXPECT_TRUE(Intact(got[i])) << "message to port " << got[i].header.dport;
  }
  EXPECT_FALSE(b_closed_.load());
  OnLoop([&] {
    if (next) next->Close();
  });
}

class ForgedFrameTest : public LinkPairTest {
 protected:
  void ExpectDropped(const MessagePtr& forged) {
    Start(true);
    const uint64_t bad0 = stats::Get(stats::kShimConnDropBadInput);
    WriteRaw(forged);
    EXPECT_TRUE(Eventually([&] { return a_closed_.load(); })) << "the link must be dropped";
    EXPECT_EQ(stats::Get(stats::kShimConnDropBadInput) - bad0, 1u);
  }
};

TEST_F(ForgedFrameTest, PayloadReferenceBeforeAnAnnouncement) {
  MessagePtr m = NewMessage();
  m->header.dport = 5;
  m->header.len = 100000;
  ASSERT_TRUE(wire::AddShimPayloadRef(&m->header, 0));
  ExpectDropped(m);
}

TEST_F(ForgedFrameTest, ReleaseOfABlockThatWasNotLent) {
  const uint64_t offset = 0;
  ExpectDropped(control::EncodeU64List(control::Op::kArenaRelease, {&offset, 1}));
}

TEST_F(ForgedFrameTest, AnnouncementWithoutItsDescriptor) {
  const uint64_t size = 1 << 20;
  ExpectDropped(control::EncodeU64List(control::Op::kArenaAnnounce, {&size, 1}));
}

}  // namespace
}  // namespace rds
