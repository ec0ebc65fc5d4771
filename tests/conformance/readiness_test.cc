// Readiness transitions with poll, ppoll, select, pselect and epoll — kernel-rds.md §A.6
// (rds_poll), §A.4 step 11, §B.5; DESIGN.md §2.3 (readiness), §7 (deviations).
//
// poll_test.cc already checks the masks one call at a time and these transitions:
//   poll/ppoll/select/epoll-LT woken from a blocked wait by an arriving message; poll: POLLIN
//   stays until the last message is read; epoll LT/ET basics; poll/select: no POLLOUT with a
//   full send buffer and POLLOUT again after RDS_CANCEL_SENT_TO; poll: POLLIN for a pending
//   congestion notification (without waiting).
// Added here:
//   * readable → empty with ppoll, select and pselect; pselect woken by an arriving message;
//   * "a socket that only sends while its send buffer is full" (poll, ppoll, select, pselect):
//     nothing reported while full, a blocked wait for writability woken when the receiver
//     drains (not by a cancel), and afterwards exact POLLOUT: every POLLOUT is followed by an
//     admitted send;
//   * epoll: EPOLLOUT is reported even with a full send buffer — the documented behaviour of
//     DESIGN.md §2.3 ("EPOLLOUT on an RDS fd is always reported"), not the kernel's;
//   * a congestion notification wakes a blocked waiter of every kind (poll, ppoll, select,
//     pselect, epoll LT and ET), and readability ends when recvmsg consumes it;
//   * epoll after RDS_CONG_MONITOR is turned off with a notification pending: nothing readable,
//     so no EPOLLIN beyond (at most) the kernel's one congestion-update report;
//   * epoll edge-triggered with 1000 messages arriving while the reader drains: every message,
//     no lost wake-up (no epoll_wait times out with data queued), no busy loop (at most one
//     epoll_wait return per message, no empty wake-ups); level-triggered one read per return;
//   * epoll with many readable sockets: every readable socket is reported.
#include <sys/epoll.h>
#include <sys/select.h>

#include <algorithm>

#include "tests/conformance/rds_test_util.h"

namespace rdstest {
namespace {

constexpr int kReadable = 1;
constexpr int kWritable = 2;

enum class Mech { kPoll, kPpoll, kSelect, kPselect, kEpollLt, kEpollEt };

std::string MechName(Mech m) {
  switch (m) {
    case Mech::kPoll: return "poll";
    case Mech::kPpoll: return "ppoll";
    case Mech::kSelect: return "select";
    case Mech::kPselect: return "pselect";
    case Mech::kEpollLt: return "epoll_lt";
    case Mech::kEpollEt: return "epoll_et";
  }
  return "?";
}

// Waits until one fd is readable and/or writable, by one mechanism. For epoll the fd is
// registered once, in the constructor (so edge-triggered sets see edges between calls).
// Wait() returns kReadable|kWritable as reported, 0 on timeout, -1 on error.
class Watcher {
 public:
  Watcher(Mech m, int fd, bool rd, bool wr) : m_(m), fd_(fd), rd_(rd), wr_(wr) {
    if (m == Mech::kEpollLt || m == Mech::kEpollEt) {
      ep_.reset(epoll_create1(EPOLL_CLOEXEC));
      if (!ep_.ok()) {
        ADD_FAILURE() << "epoll_create1: " << ErrnoName(errno);
        return;
      }
      epoll_event ev{};
      ev.events = (rd ? uint32_t{EPOLLIN} : 0u) | (wr ? uint32_t{EPOLLOUT} : 0u) |
                  (m == Mech::kEpollEt ? uint32_t{EPOLLET} : 0u);
      ev.data.fd = fd;
      if (epoll_ctl(ep_.get(), EPOLL_CTL_ADD, fd, &ev) != 0)
        ADD_FAILURE() << "epoll_ctl: " << ErrnoName(errno);
    }
  }

  int Wait(int timeout_ms) {
    switch (m_) {
      case Mech::kPoll:
      case Mech::kPpoll: {
        pollfd p{fd_, static_cast<short>((rd_ ? POLLIN : 0) | (wr_ ? POLLOUT : 0)), 0};
        int n;
        if (m_ == Mech::kPoll) {
          n = ::poll(&p, 1, timeout_ms);
        } else {
          timespec ts{timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
          sigset_t mask = SignalSet();
          n = ::ppoll(&p, 1, &ts, &mask);
        }
        if (n <= 0) return n;
        return ((p.revents & POLLIN) ? kReadable : 0) | ((p.revents & POLLOUT) ? kWritable : 0);
      }
      case Mech::kSelect:
      case Mech::kPselect: {
        fd_set r, w;
        FD_ZERO(&r);
        FD_ZERO(&w);
        if (rd_) FD_SET(fd_, &r);
        if (wr_) FD_SET(fd_, &w);
        int n;
        if (m_ == Mech::kSelect) {
          timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000L};
          n = ::select(fd_ + 1, rd_ ? &r : nullptr, wr_ ? &w : nullptr, nullptr, &tv);
        } else {
          timespec ts{timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
          sigset_t mask = SignalSet();
          n = ::pselect(fd_ + 1, rd_ ? &r : nullptr, wr_ ? &w : nullptr, nullptr, &ts, &mask);
        }
        if (n <= 0) return n;
        return (rd_ && FD_ISSET(fd_, &r) ? kReadable : 0) |
               (wr_ && FD_ISSET(fd_, &w) ? kWritable : 0);
      }
      case Mech::kEpollLt:
      case Mech::kEpollEt: {
        epoll_event ev[4];
        int n = epoll_wait(ep_.get(), ev, 4, timeout_ms);
        if (n <= 0) return n;
        int out = 0;
        for (int i = 0; i < n; ++i) {
          if (ev[i].events & EPOLLIN) out |= kReadable;
          if (ev[i].events & EPOLLOUT) out |= kWritable;
        }
        return out;
      }
    }
    return -1;
  }

 private:
  Mech m_;
  int fd_;
  bool rd_, wr_;
  Fd ep_;
};

class Readiness : public testing::TestWithParam<Mech> {
 protected:
  void SetUp() override { WarmUpLoopback(); }
};

std::string ParamName(const testing::TestParamInfo<Mech>& info) { return MechName(info.param); }

// ---- empty → readable → empty -------------------------------------------------------------------

using ReadableThenEmpty = Readiness;

// §A.6: POLLIN iff the receive queue is non-empty. Two messages: readable after the first is
// read, not readable (the wait times out) after the second.
TEST_P(ReadableThenEmpty, ReadabilityEndsWithTheLastMessage) {
  Pair p = MakePair();
  ASSERT_TRUE(p.ok());
  Watcher w(GetParam(), p.r.get(), /*rd=*/true, /*wr=*/false);
  ConsumeCongestionPollEvent(p.r.get());
  RDS_ASSERT_RC(SendTo(p.s.get(), std::string("one"), p.to), 3);
  RDS_ASSERT_RC(SendTo(p.s.get(), std::string("two"), p.to), 3);
  EXPECT_EQ(w.Wait(kPromptMs), kReadable);
  SleepMs(kSettleMs);  // both queued
  ASSERT_EQ(RecvWithin(p.r.get()).data, "one");
  EXPECT_EQ(w.Wait(0), kReadable) << "one message still queued";
  ASSERT_EQ(RecvWithin(p.r.get()).data, "two");
  ConsumeCongestionPollEvent(p.r.get());
  auto t0 = Clock::now();
  EXPECT_EQ(w.Wait(250), 0) << "readable with an empty queue";
  EXPECT_GE(ElapsedMs(t0), 200);
}

INSTANTIATE_TEST_SUITE_P(Mechanisms, ReadableThenEmpty,
                         testing::Values(Mech::kPpoll, Mech::kSelect, Mech::kPselect), ParamName);

// pselect blocked on an empty socket is woken by an arriving message.
TEST(ReadinessPselect, PselectIsWokenByAnArrivingMessage) {
  WarmUpLoopback();
  Pair p = MakePair();
  ASSERT_TRUE(p.ok());
  ConsumeCongestionPollEvent(p.r.get());
  Watcher w(Mech::kPselect, p.r.get(), true, false);
  AsyncCall call([&w] { return static_cast<long>(w.Wait(6000)); });
  LetItBlock();
  EXPECT_FALSE(call.done()) << "pselect returned " << call.rc() << " on an empty socket";
  auto t1 = Clock::now();
  RDS_ASSERT_RC(SendTo(p.s.get(), std::string("w"), p.to), 1);
  ASSERT_TRUE(call.WaitFor(kPromptMs + 6000));
  EXPECT_EQ(call.rc(), kReadable);
  EXPECT_LT(ElapsedMs(t1), kPromptMs) << "woken by the timeout, not by the message";
}

// ---- send buffer full → not full ------------------------------------------------------------------

using SendBufferDrains = Readiness;

// "A socket that only sends while its send buffer is full": §A.6 POLLOUT iff queued send bytes
// are below sndbuf; §A.4 step 11 admission uses the same test. The send buffer is filled towards
// a stopped peer process (rds_test_util.h StoppedPeer), then:
//   1. nothing is reported (no POLLOUT, and the socket has nothing to read);
//   2. a wait for writability blocks, and is woken once the peer is resumed and drains;
//   3. while the peer keeps receiving, the socket sends on with "send until EAGAIN, then wait
//      for writability": every wait reports writable (no lost wake-up) and the send after it is
//      admitted (POLLOUT is exact, not a guess);
//   4. the peer received every message that was accepted.
TEST_P(SendBufferDrains, SenderWaitingForWritabilityIsWokenWhenTheReceiverDrains) {
  RDS_SKIP_UNDER_TSAN("fork of a multi-threaded process");
  StoppedPeer peer;
  ASSERT_TRUE(peer.Start());
  BindOpts o;
  o.sndbuf = 32768;
  Fd s = Bound4("127.0.0.1", 0, o);
  ASSERT_TRUE(s.ok());
  long sent = 0;
  RDS_FILL_OR_SKIP(s.get(), peer.addr(), 4096, &sent);
  ConsumeCongestionPollEvent(s.get());
  Watcher both(GetParam(), s.get(), /*rd=*/true, /*wr=*/true);
  EXPECT_EQ(both.Wait(0), 0) << "a full sender with nothing to read must report nothing";

  Watcher w(GetParam(), s.get(), /*rd=*/false, /*wr=*/true);
  AsyncCall waiter([&w] { return static_cast<long>(w.Wait(10000)); });
  LetItBlock();
  EXPECT_FALSE(waiter.done()) << "reported " << waiter.rc() << " with a full send buffer";

  auto t_resume = Clock::now();
  AsyncCall resumer([&peer] { return peer.ResumeAndCount(); });
  ASSERT_TRUE(waiter.WaitFor(12000));
  EXPECT_EQ(waiter.rc(), kWritable) << "woken without writability (0 = timeout)";
  EXPECT_LT(ElapsedMs(t_resume), kPromptMs) << "not woken promptly when space was freed";

  // Exact POLLOUT while the peer drains.
  std::string payload = Payload(4096, 5);
  long pumped = 0, waits = 0, lost_wakeups = 0, inexact = 0;
  bool just_waited = false;
  while (pumped < 400 && lost_wakeups == 0) {
    ssize_t r = SendTo(s.get(), payload, peer.addr(), MSG_DONTWAIT);
    if (r == static_cast<ssize_t>(payload.size())) {
      ++pumped;
      just_waited = false;
      continue;
    }
    ASSERT_EQ(errno, EAGAIN) << ErrnoName(errno);
    if (just_waited) ++inexact;  // writable was reported, yet the send was refused
    ++waits;
    int got = w.Wait(kPromptMs);
    if (got != kWritable) ++lost_wakeups;
    just_waited = true;
  }
  EXPECT_EQ(lost_wakeups, 0) << "a wait for writability timed out while the peer was draining";
  EXPECT_EQ(inexact, 0) << "writable reported but the next send got EAGAIN (" << waits
                        << " waits)";
  EXPECT_GT(waits, 0) << "the send buffer never filled again while the peer drained: the "
                        "exactness check did not run";
  printf("%s: filled with %ld messages, then %ld more with %ld waits for writability\n",
         MechName(GetParam()).c_str(), sent, pumped, waits);
  ASSERT_TRUE(resumer.WaitFor(25000));
  EXPECT_EQ(resumer.rc(), sent + pumped) << "the peer did not receive every accepted message";
}

INSTANTIATE_TEST_SUITE_P(Mechanisms, SendBufferDrains,
                         testing::Values(Mech::kPoll, Mech::kPpoll, Mech::kSelect, Mech::kPselect),
                         ParamName);

// DESIGN.md §2.3: "EPOLLOUT on an RDS fd is always reported (the fd never sends); a send may then
// fail with EAGAIN/ENOBUFS." The documented behaviour (the kernel would not report EPOLLOUT here,
// §A.6; poll does not, see above): EPOLLOUT with a full send buffer, and the send is refused.
TEST(ReadinessEpoll, EpolloutIsReportedEvenWithAFullSendBufferAsDocumented) {
  RDS_SKIP_UNDER_TSAN("fork of a multi-threaded process");
  WarmUpLoopback();
  StoppedPeer peer;
  ASSERT_TRUE(peer.Start());
  BindOpts o;
  o.sndbuf = 32768;
  Fd s = Bound4("127.0.0.1", 0, o);
  ASSERT_TRUE(s.ok());
  RDS_FILL_OR_SKIP(s.get(), peer.addr(), 4096, nullptr);
  EXPECT_EQ(PollOne(s.get(), POLLOUT, 0), 0) << "poll: no POLLOUT (the exact mask)";
  for (Mech m : {Mech::kEpollLt, Mech::kEpollEt}) {
    Watcher w(m, s.get(), false, true);
    EXPECT_EQ(w.Wait(kPromptMs), kWritable) << MechName(m) << ": DESIGN.md §2.3 says EPOLLOUT "
                                               "is always reported";
  }
  RDS_EXPECT_ERRNO(SendTo(s.get(), Payload(4096), peer.addr(), MSG_DONTWAIT), EAGAIN);
}

// ---- congestion notification readable ---------------------------------------------------------------

using CongestionNotification = Readiness;

// §B.5 steps 3-4 and §A.6: with RDS_CONG_MONITOR on, a pending notification makes the socket
// readable ("The socket is then woken and poll reports POLLIN"). A sender that got ENOBUFS waits
// for readability; the uncongestion update wakes it; recvmsg consumes the notification and
// readability ends.
TEST_P(CongestionNotification, NotificationWakesABlockedWaiterAndReadabilityEndsWhenConsumed) {
  BindOpts ro;
  ro.transport = RDS_TRANS_TCP;
  ro.rcvbuf = 4096;
  Fd r = Bound4("127.0.0.1", 0, ro);
  Fd filler = TcpTransportSender();
  Fd s = TcpTransportSender();
  ASSERT_TRUE(r.ok() && filler.ok() && s.ok());
  ASSERT_TRUE(SetInt(s.get(), SOL_RDS, RDS_CONG_MONITOR, 1));
  ASSERT_TRUE(Congest(filler.get(), r.get(), 4096));
  errno = 0;
  ssize_t rc = SendTo(s.get(), std::string("y"), Name4(r.get()), MSG_DONTWAIT);
  int e = errno;
  ASSERT_EQ(rc, -1) << "send to a congested port succeeded";
  ASSERT_EQ(e, ENOBUFS) << ErrnoName(e);
  Watcher w(GetParam(), s.get(), /*rd=*/true, /*wr=*/false);
  ASSERT_EQ(w.Wait(0), 0) << "readable before any notification";

  AsyncCall call([&w] { return static_cast<long>(w.Wait(8000)); });
  LetItBlock();
  EXPECT_FALSE(call.done()) << "reported " << call.rc() << " before the map update";
  auto t0 = Clock::now();
  for (int i = 0; i < 3; ++i) ASSERT_EQ(RecvWithin(r.get()).n, 1024);  // below half: update
  ASSERT_TRUE(call.WaitFor(10000));
  EXPECT_EQ(call.rc(), kReadable) << "not woken by the notification (0 = timeout)";
  EXPECT_LT(ElapsedMs(t0), kPromptMs);

  Received n = RecvOnce(s.get(), 16, MSG_DONTWAIT, 64);
  ASSERT_EQ(n.n, 0) << ErrnoName(n.err);
  EXPECT_EQ(w.Wait(250), 0) << "still readable after the notification was consumed";
}

INSTANTIATE_TEST_SUITE_P(Mechanisms, CongestionNotification,
                         testing::Values(Mech::kPoll, Mech::kPpoll, Mech::kSelect, Mech::kPselect,
                                         Mech::kEpollLt, Mech::kEpollEt),
                         ParamName);

// §A.7 "Turning it off clears the mask and any pending notification": the socket has nothing
// to read afterwards. rds_poll may report POLLIN|POLLWRBAND once (§A.6: the monitor is off and
// the congestion generation moved), so one report is allowed; after that, a level-triggered
// epoll must not report EPOLLIN for a socket where recvmsg says EAGAIN (that would be a busy
// loop for every epoll-based program).
TEST(ReadinessEpoll, NoEpollinAfterTurningTheMonitorOffClearsAPendingNotification) {
  WarmUpLoopback();
  Fd s, r;
  uint16_t port = 0;
  ASSERT_NO_FATAL_FAILURE(MakeCongNotificationPending(&s, &r, &port));
  Watcher w(Mech::kEpollLt, s.get(), true, false);
  ASSERT_EQ(w.Wait(kPromptMs), kReadable) << "the pending notification is readable";
  ASSERT_TRUE(SetInt(s.get(), SOL_RDS, RDS_CONG_MONITOR, 0));
  Received m = RecvOnce(s.get(), 16, MSG_DONTWAIT, 64);
  EXPECT_EQ(m.n, -1);
  EXPECT_EQ(m.err, EAGAIN) << "nothing to read after the monitor was turned off";
  ConsumeCongestionPollEvent(s.get());
  EXPECT_EQ(PollOne(s.get(), POLLIN, 0), 0) << "poll: not readable";
  (void)w.Wait(0);  // the one report rds_poll may make
  EXPECT_EQ(w.Wait(250), 0) << "epoll keeps reporting EPOLLIN for a socket with nothing to read";
}

// ---- epoll with many messages and many sockets ------------------------------------------------------

constexpr int kManyMessages = 1000;

std::string Numbered(int i) {
  char b[16];
  snprintf(b, sizeof b, "m%05d", i);
  return b;
}

// Sends kManyMessages numbered messages from s to `to` in bursts of 25 with short pauses, so
// that arrivals interleave with the reader's draining.
std::thread StartBurstySender(int s, sockaddr_in to, std::atomic<bool>* done,
                              std::atomic<int>* failures) {
  return std::thread([s, to, done, failures] {
    for (int i = 0; i < kManyMessages; ++i) {
      if (SendTo(s, Numbered(i), to) != 6) failures->fetch_add(1);
      if (i % 25 == 24) SleepMs(1);
    }
    done->store(true);
  });
}

// Shim deviation (DESIGN.md §7): an epoll-watched RDS socket needs one more kernel fd (its
// readiness-token sender, §2.3). When none can be had, epoll_ctl must fail (ENOMEM, as when
// the kernel cannot allocate the watch) and leave nothing registered: a registration that
// succeeded but could never report the socket would hang an epoll server at its fd limit.
TEST(ReadinessEpoll, EpollCtlWithoutAFdForTheWatchFailsAndRegistersNothing) {
  Pair p = MakePair();
  ASSERT_TRUE(p.ok());
  Fd ep(epoll_create1(EPOLL_CLOEXEC));
  ASSERT_TRUE(ep.ok());
  epoll_event reg{};
  reg.events = EPOLLIN;
  reg.data.fd = p.r.get();
  {
    FdsExhausted none_left;
    errno = 0;
    EXPECT_EQ(epoll_ctl(ep.get(), EPOLL_CTL_ADD, p.r.get(), &reg), -1);
    EXPECT_EQ(errno, ENOMEM) << ErrnoName(errno);
  }
  // Nothing was left registered: adding again succeeds (not EEXIST), and a message is reported.
  ASSERT_EQ(epoll_ctl(ep.get(), EPOLL_CTL_ADD, p.r.get(), &reg), 0) << ErrnoName(errno);
  ASSERT_EQ(SendTo(p.s.get(), "x", p.to), 1) << ErrnoName(errno);
  epoll_event ev[2];
  EXPECT_EQ(epoll_wait(ep.get(), ev, 2, kPromptMs), 1);
}

// DESIGN.md §2.3: "queues one more [token] per arriving message so edge-triggered sets see an
// edge per arrival, as with a kernel socket." An edge-triggered reader that drains to EAGAIN
// after every wake-up must get every message (in order), must never sit in epoll_wait while
// messages are queued (a lost wake-up shows as a 2 s timeout with data queued), and must not be
// woken without data (at most one epoll_wait return per message, no empty wake-ups).
TEST(ReadinessEpoll, EdgeTriggeredReaderDrainsAThousandMessagesWithoutLostOrSpuriousWakeups) {
  WarmUpLoopback();
  Pair p = MakePair();
  ASSERT_TRUE(p.ok());
  Fd ep(epoll_create1(EPOLL_CLOEXEC));
  ASSERT_TRUE(ep.ok());
  epoll_event reg{};
  reg.events = EPOLLIN | EPOLLET;
  reg.data.fd = p.r.get();
  ASSERT_EQ(epoll_ctl(ep.get(), EPOLL_CTL_ADD, p.r.get(), &reg), 0);

  std::atomic<bool> sender_done{false};
  std::atomic<int> send_failures{0};
  std::thread sender = StartBurstySender(p.s.get(), p.to, &sender_done, &send_failures);
  int received = 0, returns = 0, empty_wakeups = 0, timeouts_with_data = 0, out_of_order = 0;
  auto deadline = Clock::now() + std::chrono::seconds(15);
  while (received < kManyMessages && Clock::now() < deadline) {
    epoll_event ev[4];
    int n = epoll_wait(ep.get(), ev, 4, 2000);
    if (n < 0 && errno == EINTR) continue;
    ASSERT_GE(n, 0) << ErrnoName(errno);
    if (n == 0) {
      if (PollOne(p.r.get(), POLLIN, 0) & POLLIN) {
        Received peek = RecvOnce(p.r.get(), 64, MSG_DONTWAIT | MSG_PEEK);
        if (peek.n >= 0) ++timeouts_with_data;  // queued, yet no edge woke us
      }
      if (timeouts_with_data > 0 || sender_done.load()) break;  // lost, or never sent
      continue;
    }
    ++returns;
    int got_now = 0;
    for (;;) {
      Received m = RecvOnce(p.r.get(), 64, MSG_DONTWAIT);
      if (m.n < 0) {
        ASSERT_EQ(m.err, EAGAIN) << ErrnoName(m.err);
        break;
      }
      if (m.data != Numbered(received)) ++out_of_order;
      ++received;
      ++got_now;
    }
    if (got_now == 0) ++empty_wakeups;
  }
  sender.join();
  EXPECT_EQ(send_failures.load(), 0);
  EXPECT_EQ(received, kManyMessages);
  EXPECT_EQ(out_of_order, 0);
  EXPECT_EQ(timeouts_with_data, 0) << "lost wake-up: messages queued but no edge";
  EXPECT_LE(returns, kManyMessages) << "more epoll_wait returns than messages";
  EXPECT_EQ(empty_wakeups, 0) << "edge-triggered wake-ups with nothing to read";
  // Drained: no further edge.
  epoll_event ev[4];
  EXPECT_EQ(epoll_wait(ep.get(), ev, 4, 200), 0);
  testing::Test::RecordProperty("epoll_wait_returns", returns);
  printf("edge-triggered: %d messages, %d epoll_wait returns, %d empty\n", received, returns,
         empty_wakeups);
}

// Level-triggered, one recvmsg per wake-up: exactly one return per message, none empty, and
// nothing once the queue is empty.
TEST(ReadinessEpoll, LevelTriggeredReaderGetsOneReturnPerMessageAndNoneWhenEmpty) {
  WarmUpLoopback();
  Pair p = MakePair();
  ASSERT_TRUE(p.ok());
  Fd ep(epoll_create1(EPOLL_CLOEXEC));
  ASSERT_TRUE(ep.ok());
  epoll_event reg{};
  reg.events = EPOLLIN;
  reg.data.fd = p.r.get();
  ASSERT_EQ(epoll_ctl(ep.get(), EPOLL_CTL_ADD, p.r.get(), &reg), 0);

  std::atomic<bool> sender_done{false};
  std::atomic<int> send_failures{0};
  std::thread sender = StartBurstySender(p.s.get(), p.to, &sender_done, &send_failures);
  int received = 0, returns = 0, empty_wakeups = 0, timeouts = 0, out_of_order = 0;
  auto deadline = Clock::now() + std::chrono::seconds(15);
  while (received < kManyMessages && Clock::now() < deadline && timeouts == 0) {
    epoll_event ev[4];
    int n = epoll_wait(ep.get(), ev, 4, 2000);
    if (n < 0 && errno == EINTR) continue;
    ASSERT_GE(n, 0) << ErrnoName(errno);
    if (n == 0) {
      ++timeouts;
      continue;
    }
    ++returns;
    Received m = RecvOnce(p.r.get(), 64, MSG_DONTWAIT);
    if (m.n < 0) {
      ASSERT_EQ(m.err, EAGAIN) << ErrnoName(m.err);
      ++empty_wakeups;
      if (empty_wakeups > 50) break;  // a busy loop: stop counting
      continue;
    }
    if (m.data != Numbered(received)) ++out_of_order;
    ++received;
  }
  sender.join();
  EXPECT_EQ(send_failures.load(), 0);
  EXPECT_EQ(received, kManyMessages);
  EXPECT_EQ(out_of_order, 0);
  EXPECT_EQ(timeouts, 0) << "lost wake-up: level-triggered epoll_wait timed out";
  EXPECT_EQ(empty_wakeups, 0) << "EPOLLIN reported with nothing to read";
  EXPECT_EQ(returns, kManyMessages);
  epoll_event ev[4];
  EXPECT_EQ(epoll_wait(ep.get(), ev, 4, 200), 0) << "EPOLLIN after the queue was drained";
}

// Every readable socket in an epoll set is reported, however many there are (the kernel runs
// rds_poll per socket; nothing is shared between sockets). `sockets` receivers each get
// `per_socket` messages; level-triggered epoll must report all of them, as poll() does.
void ExpectEpollReportsEveryReadableSocket(int sockets, int per_socket) {
  WarmUpLoopback();
  Fd ep(epoll_create1(EPOLL_CLOEXEC));
  ASSERT_TRUE(ep.ok());
  std::vector<Fd> rs;
  for (int i = 0; i < sockets; ++i) {
    rs.push_back(Bound4());
    ASSERT_TRUE(rs.back().ok());
    epoll_event reg{};
    reg.events = EPOLLIN;
    reg.data.u32 = static_cast<uint32_t>(i);
    ASSERT_EQ(epoll_ctl(ep.get(), EPOLL_CTL_ADD, rs.back().get(), &reg), 0) << ErrnoName(errno);
  }
  Fd s = Bound4();
  ASSERT_TRUE(s.ok());
  for (int i = 0; i < sockets; ++i) {
    sockaddr_in to = Name4(rs[i].get());
    for (int k = 0; k < per_socket; ++k) RDS_ASSERT_RC(SendTo(s.get(), std::string("x"), to), 1);
  }
  // Wait until every message is queued (poll is exact; it dequeues nothing). Fresh sockets may
  // report the one-time congestion-update POLLIN (§A.6): consume that first.
  for (auto& r : rs) ConsumeCongestionPollEvent(r.get());
  auto deadline = Clock::now() + std::chrono::milliseconds(kPromptMs);
  int readable = 0;
  for (;;) {
    std::vector<pollfd> pf;
    for (auto& r : rs) pf.push_back({r.get(), POLLIN, 0});
    ::poll(pf.data(), pf.size(), 0);
    readable = static_cast<int>(
        std::count_if(pf.begin(), pf.end(), [](const pollfd& p) { return p.revents & POLLIN; }));
    if (readable == sockets || Clock::now() > deadline) break;
    SleepMs(20);
  }
  ASSERT_EQ(readable, sockets) << "poll: not every socket received its messages";
  std::vector<epoll_event> ev(sockets + 8);
  int n = epoll_wait(ep.get(), ev.data(), static_cast<int>(ev.size()), kPromptMs);
  std::vector<bool> seen(sockets, false);
  for (int i = 0; i < n; ++i) seen[ev[i].data.u32] = true;
  int missing = static_cast<int>(std::count(seen.begin(), seen.end(), false));
  EXPECT_EQ(n, sockets) << missing << " of " << sockets << " readable sockets (" << per_socket
                        << " message(s) each) are not reported by epoll_wait";
  // And reading one of the missing ones works: the data is there.
  for (int i = 0; i < sockets && missing > 0; ++i) {
    if (!seen[i]) {
      Received m = RecvOnce(rs[i].get(), 16, MSG_DONTWAIT);
      EXPECT_EQ(m.n, 1) << "socket " << i << " was not readable after all";
      break;
    }
  }
}

TEST(ReadinessEpoll, EpollReportsEveryOneOf64ReadableSocketsWithTwelveMessagesEach) {
  ExpectEpollReportsEveryReadableSocket(64, 12);
}

TEST(ReadinessEpoll, EpollReportsEveryOneOf320ReadableSocketsWithOneMessageEach) {
  ExpectEpollReportsEveryReadableSocket(320, 1);
}

}  // namespace
}  // namespace rdstest
