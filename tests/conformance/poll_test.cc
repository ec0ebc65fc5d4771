// poll()/ppoll()/select()/pselect()/epoll — kernel-rds.md §A.6 (rds_poll) for sockets on the
// loopback/TCP transports, §B.5, §E.14; DESIGN.md §2.3.
//
// The masks under test (§A.6):
//   POLLIN|POLLRDNORM   iff a message (or a notification) is queued — plus, with
//                       RDS_CONG_MONITOR off, once after any congestion-map update host-wide
//                       (reported as POLLIN|POLLRDNORM|POLLWRBAND and consumed by that poll);
//   POLLOUT|POLLWRNORM  iff the bytes queued for sending are below sndbuf;
//   never POLLHUP, POLLERR only for sk_err / error queue (never set here).
// Checks for the *absence* of POLLIN first consume a possible congestion-update event with
// ConsumeCongestionPollEvent(); the fixture warms up the loopback connection so that its
// initial map exchange is over before any test starts.
#include <sys/epoll.h>
#include <sys/select.h>

#include <algorithm>
#include <functional>
#include <optional>

#include "tests/conformance/rds_test_util.h"

namespace rdstest {
namespace {

constexpr short kAllEvents =
    POLLIN | POLLPRI | POLLOUT | POLLRDNORM | POLLRDBAND | POLLWRNORM | POLLWRBAND | POLLRDHUP;
constexpr short kIdleMask = POLLOUT | POLLWRNORM;

class Poll : public testing::Test {
 protected:
  void SetUp() override { WarmUpLoopback(); }

  // A receiver r_ and a sender s_ on 127.0.0.1.
  void SetUpPair() {
    Pair p = MakePair();
    ASSERT_TRUE(p.ok());
    s_ = std::move(p.s);
    r_ = std::move(p.r);
    to_ = p.to;
  }
  // Sends m to r_ and waits until it is queued there.
  void Deliver(const std::string& m) {
    ASSERT_EQ(SendTo(s_.get(), m, to_), static_cast<ssize_t>(m.size())) << ErrnoName(errno);
    ASSERT_GE(RecvWithin(r_.get(), 65536, kPromptMs, MSG_PEEK).n, 0) << "not delivered";
  }

  Fd s_, r_;
  sockaddr_in to_{};
};

std::string MaskStr(int m) {
  std::string s;
  auto add = [&](int bit, const char* name) {
    if (m & bit) s += std::string(s.empty() ? "" : "|") + name;
  };
  add(POLLIN, "POLLIN");
  add(POLLPRI, "POLLPRI");
  add(POLLOUT, "POLLOUT");
  add(POLLERR, "POLLERR");
  add(POLLHUP, "POLLHUP");
  add(POLLNVAL, "POLLNVAL");
  add(POLLRDNORM, "POLLRDNORM");
  add(POLLRDBAND, "POLLRDBAND");
  add(POLLWRNORM, "POLLWRNORM");
  add(POLLWRBAND, "POLLWRBAND");
  add(POLLRDHUP, "POLLRDHUP");
  return s.empty() ? "0" : s;
}

#define EXPECT_MASK(got, want) EXPECT_EQ((got), (want)) << MaskStr(got) << " != " << MaskStr(want)

// Runs `wait` (a call that blocks) on its own thread, signals that thread with SIGUSR1 (whose
// handler the caller installed) and expects the call to end at once with EINTR, the handler
// having run `handled` times in all.
void ExpectEintrOnSignal(std::function<long()> wait, int handled) {
  AsyncCall call(std::move(wait));
  LetItBlock();
  ASSERT_FALSE(call.done()) << "returned " << call.rc();
  pthread_kill(call.handle(), SIGUSR1);
  ASSERT_TRUE(call.WaitFor(kPromptMs)) << "the signal did not end the wait";
  EXPECT_EQ(call.rc(), -1);
  EXPECT_EQ(call.err(), EINTR) << ErrnoName(call.err());
  EXPECT_EQ(ScopedSignalHandler::count().load(), handled);
}

// ---- poll(): masks ----------------------------------------------------------------------------

TEST_F(Poll, PollOnIdleBoundSocketReportsOnlyPolloutAndWrnorm) {
  Fd r = Bound4();
  ASSERT_TRUE(r.ok());
  ConsumeCongestionPollEvent(r.get());
  EXPECT_MASK(PollOne(r.get(), kAllEvents, 0), kIdleMask);
}

TEST_F(Poll, PollOnUnboundSocketReportsPollout) {
  Fd r = RdsSocket();
  ASSERT_TRUE(r.ok());
  ConsumeCongestionPollEvent(r.get());
  EXPECT_MASK(PollOne(r.get(), kAllEvents, 0), kIdleMask);
}

TEST_F(Poll, PollReportsPollinAndRdnormWhenAMessageIsQueued) {
  ASSERT_NO_FATAL_FAILURE(SetUpPair());
  ASSERT_NO_FATAL_FAILURE(Deliver("m"));
  int m = PollOne(r_.get(), kAllEvents, 0);
  EXPECT_MASK(m & (POLLIN | POLLRDNORM | POLLOUT | POLLWRNORM),
              POLLIN | POLLRDNORM | POLLOUT | POLLWRNORM);
  EXPECT_EQ(m & (POLLHUP | POLLERR | POLLPRI | POLLRDBAND | POLLRDHUP | POLLNVAL), 0)
      << MaskStr(m);
  // Level-triggered: it stays while the message is there.
  EXPECT_TRUE(PollOne(r_.get(), POLLIN, 0) & POLLIN);
}

TEST_F(Poll, PollReportsPollinForAZeroLengthMessage) {
  ASSERT_NO_FATAL_FAILURE(SetUpPair());
  ASSERT_NO_FATAL_FAILURE(Deliver(""));
  EXPECT_TRUE(PollOne(r_.get(), POLLIN, 0) & POLLIN);
}

TEST_F(Poll, PollinStaysUntilTheLastMessageIsDequeued) {
  ASSERT_NO_FATAL_FAILURE(SetUpPair());
  ASSERT_NO_FATAL_FAILURE(Deliver("one"));
  ASSERT_EQ(SendTo(s_.get(), std::string("two"), to_), 3);
  SleepMs(kSettleMs);
  ASSERT_EQ(RecvWithin(r_.get()).data, "one");
  EXPECT_TRUE(PollOne(r_.get(), POLLIN, 0) & POLLIN) << "second message still queued";
  ASSERT_EQ(RecvWithin(r_.get()).data, "two");
  ConsumeCongestionPollEvent(r_.get());
  EXPECT_MASK(PollOne(r_.get(), kAllEvents, 0), kIdleMask);
}

TEST_F(Poll, PollinIsNotClearedByMsgPeek) {
  ASSERT_NO_FATAL_FAILURE(SetUpPair());
  ASSERT_NO_FATAL_FAILURE(Deliver("peek"));
  ASSERT_EQ(RecvOnce(r_.get(), 64, MSG_DONTWAIT | MSG_PEEK).n, 4);
  EXPECT_TRUE(PollOne(r_.get(), POLLIN, 0) & POLLIN);
}

// POLLHUP is never set: not even when the connected peer socket is gone.
TEST_F(Poll, PollNeverReportsPollhupOrPollerr) {
  ASSERT_NO_FATAL_FAILURE(SetUpPair());
  ASSERT_EQ(::connect(s_.get(), SA(&to_), sizeof to_), 0);
  ASSERT_EQ(::send(s_.get(), "x", 1, 0), 1);
  r_.reset();
  SleepMs(kSettleMs);
  ConsumeCongestionPollEvent(s_.get());
  EXPECT_MASK(PollOne(s_.get(), kAllEvents, 0), kIdleMask);
}

// The blocked poll runs the engine's event loop meanwhile (shim_poll_waits_driven, §2.3).
TEST_F(Poll, PollBlocksUntilAMessageArrives) {
  ASSERT_NO_FATAL_FAILURE(SetUpPair());
  ConsumeCongestionPollEvent(r_.get());
  const uint64_t before = ReadCounter("shim_poll_waits_driven");
  int rfd = r_.get();
  auto t0 = Clock::now();
  AsyncCall call([rfd] {
    pollfd p{rfd, POLLIN, 0};
    long n = ::poll(&p, 1, 6000);
    return n == 1 ? static_cast<long>(p.revents) : -100 - n;
  });
  LetItBlock();
  EXPECT_FALSE(call.done()) << "poll returned " << call.rc() << " with nothing queued";
  EXPECT_GT(ReadCounter("shim_poll_waits_driven"), before) << "the blocked poll did not drive";
  ASSERT_EQ(SendTo(s_.get(), std::string("wake"), to_), 4);
  ASSERT_TRUE(call.WaitFor(kPromptMs + 6000));
  EXPECT_LT(ElapsedMs(t0), kPromptMs + 1000) << "poll was not woken by the message";
  EXPECT_TRUE(call.rc() & POLLIN) << call.rc();
}

TEST_F(Poll, PollTimesOutWithZeroWhenNothingArrives) {
  Fd r = Bound4();
  ASSERT_TRUE(r.ok());
  ConsumeCongestionPollEvent(r.get());
  pollfd p{r.get(), POLLIN, 0};
  auto t0 = Clock::now();
  EXPECT_EQ(::poll(&p, 1, 250), 0);
  EXPECT_GE(ElapsedMs(t0), 200);
  EXPECT_EQ(p.revents, 0);
}

// A negative fd entry is ignored and a closed descriptor gives POLLNVAL, as for any fd.
TEST_F(Poll, PollHandlesIgnoredAndInvalidEntries) {
  ASSERT_NO_FATAL_FAILURE(SetUpPair());
  ASSERT_NO_FATAL_FAILURE(Deliver("x"));
  int closed = ::dup(r_.get());
  ASSERT_GE(closed, 0);
  ::close(closed);
  pollfd p[3] = {{-1, POLLIN, 0}, {r_.get(), POLLIN, 0}, {closed, POLLIN, 0}};
  EXPECT_EQ(::poll(p, 3, 0), 2);
  EXPECT_EQ(p[0].revents, 0);
  EXPECT_TRUE(p[1].revents & POLLIN);
  EXPECT_EQ(p[2].revents, POLLNVAL);
}

// RDS and ordinary descriptors in one call.
TEST_F(Poll, PollMixesRdsAndOrdinaryDescriptors) {
  ASSERT_NO_FATAL_FAILURE(SetUpPair());
  int pfd[2];
  ASSERT_EQ(pipe(pfd), 0);
  Fd prd(pfd[0]), pwr(pfd[1]);
  ConsumeCongestionPollEvent(r_.get());
  ASSERT_EQ(::write(pwr.get(), "p", 1), 1);
  pollfd p[2] = {{r_.get(), POLLIN, 0}, {prd.get(), POLLIN, 0}};
  EXPECT_EQ(::poll(p, 2, 0), 1);
  EXPECT_EQ(p[0].revents, 0) << MaskStr(p[0].revents);
  EXPECT_TRUE(p[1].revents & POLLIN);
  char c;
  ASSERT_EQ(::read(prd.get(), &c, 1), 1);
  ASSERT_NO_FATAL_FAILURE(Deliver("r"));
  p[0].revents = p[1].revents = 0;
  EXPECT_EQ(::poll(p, 2, 0), 1);
  EXPECT_TRUE(p[0].revents & POLLIN);
  EXPECT_EQ(p[1].revents, 0);
}

// A poll blocked on an RDS fd and an ordinary fd is woken by the ordinary one.
TEST_F(Poll, PollBlockedOnRdsAndPipeIsWokenByThePipe) {
  ASSERT_NO_FATAL_FAILURE(SetUpPair());
  int pfd[2];
  ASSERT_EQ(pipe(pfd), 0);
  Fd prd(pfd[0]), pwr(pfd[1]);
  ConsumeCongestionPollEvent(r_.get());
  int rfd = r_.get(), pr = prd.get();
  AsyncCall call([rfd, pr] {
    pollfd p[2] = {{rfd, POLLIN, 0}, {pr, POLLIN, 0}};
    long n = ::poll(p, 2, 6000);
    return n == 1 && (p[1].revents & POLLIN) && p[0].revents == 0 ? 1L : -100 - n;
  });
  LetItBlock();
  EXPECT_FALSE(call.done());
  ASSERT_EQ(::write(pwr.get(), "p", 1), 1);
  ASSERT_TRUE(call.WaitFor(kPromptMs + 6000));
  EXPECT_EQ(call.rc(), 1);
}

// ---- POLLOUT and the send buffer (§A.6, §A.4 step 11) -----------------------------------------

TEST_F(Poll, PolloutIsClearWhileTheSndbufIsFullAndBackAfterCancel) {
  RDS_SKIP_UNDER_TSAN("fork of a multi-threaded process");
  StoppedPeer peer;
  ASSERT_TRUE(peer.Start());
  BindOpts o;
  o.sndbuf = 32768;
  Fd s = Bound4("127.0.0.1", 0, o);
  ASSERT_TRUE(s.ok());
  RDS_FILL_OR_SKIP(s.get(), peer.addr(), 4096, nullptr);
  ConsumeCongestionPollEvent(s.get());
  EXPECT_EQ(PollOne(s.get(), kAllEvents, 0) & (POLLOUT | POLLWRNORM), 0);
  EXPECT_EQ(PollOne(s.get(), POLLOUT, 200), 0) << "POLLOUT with a full send buffer";
  // RDS_CANCEL_SENT_TO frees the queued bytes (§A.7): room again.
  ASSERT_EQ(CancelSentTo(s.get(), peer.addr()), 0) << ErrnoName(errno);
  EXPECT_MASK(PollOne(s.get(), POLLOUT | POLLWRNORM, kPromptMs), POLLOUT | POLLWRNORM);
}

TEST_F(Poll, SelectDoesNotReportWritableWhileTheSndbufIsFull) {
  RDS_SKIP_UNDER_TSAN("fork of a multi-threaded process");
  StoppedPeer peer;
  ASSERT_TRUE(peer.Start());
  BindOpts o;
  o.sndbuf = 32768;
  Fd s = Bound4("127.0.0.1", 0, o);
  ASSERT_TRUE(s.ok());
  RDS_FILL_OR_SKIP(s.get(), peer.addr(), 4096, nullptr);
  fd_set w;
  FD_ZERO(&w);
  FD_SET(s.get(), &w);
  timeval tv{0, 100000};
  EXPECT_EQ(::select(s.get() + 1, nullptr, &w, nullptr, &tv), 0);
}

// §A.6: "A later send may still hit ENOBUFS from congestion" — POLLOUT is about the send buffer
// only, not about the destination.
TEST_F(Poll, PolloutIsReportedEvenWhenTheDestinationIsCongested) {
  Fd s = TcpTransportSender();
  Fd r = TcpTransportReceiver(4096);
  ASSERT_TRUE(s.ok() && r.ok());
  ASSERT_TRUE(Congest(s.get(), r.get(), 4096));
  RDS_EXPECT_ERRNO(SendTo(s.get(), std::string("y"), Name4(r.get()), MSG_DONTWAIT), ENOBUFS);
  EXPECT_TRUE(PollOne(s.get(), POLLOUT, 0) & POLLOUT);
}

// ---- congestion-update events (§A.6, §B.5, §E.14) -------------------------------------------------

// "RDS_CONG_MONITOR is off and any congestion-map update has been received host-wide since this
// socket's last poll ... reports POLLIN|POLLRDNORM|POLLWRBAND, and the poll itself consumes the
// event."
TEST_F(Poll, PollReportsSpuriousPollinWrbandOnceAfterACongestionUpdate) {
  Fd idle = Bound4();
  ASSERT_TRUE(idle.ok());
  ConsumeCongestionPollEvent(idle.get());
  ASSERT_EQ(PollOne(idle.get(), POLLIN, 0), 0);
  Fd s = TcpTransportSender();
  Fd r = TcpTransportReceiver(4096);
  ASSERT_TRUE(s.ok() && r.ok());
  ASSERT_TRUE(Congest(s.get(), r.get(), 4096));  // the port's bit is set: a map update goes out
  int first = PollOne(idle.get(), kAllEvents, 0);
  EXPECT_MASK(first, POLLIN | POLLRDNORM | POLLWRBAND | POLLOUT | POLLWRNORM);
  // Consumed by that poll.
  EXPECT_MASK(PollOne(idle.get(), kAllEvents, 0), kIdleMask);
  // The idle socket really had nothing to read.
  Received m = RecvOnce(idle.get(), 16, MSG_DONTWAIT);
  EXPECT_EQ(m.n, -1);
  EXPECT_EQ(m.err, EAGAIN);
}

// "If the socket has 'seen congestion', poll also waits on a global wait queue, so that a
// cong-map update wakes it": a sender that got ENOBUFS and polls for POLLIN is woken when the
// destination becomes uncongested.
TEST_F(Poll, PollOfASenderThatSawCongestionIsWokenByTheUncongestionUpdate) {
  Fd s = TcpTransportSender();
  Fd r = TcpTransportReceiver(4096);
  ASSERT_TRUE(s.ok() && r.ok());
  ASSERT_TRUE(Congest(s.get(), r.get(), 4096));
  ConsumeCongestionPollEvent(s.get());  // the congestion update itself
  RDS_EXPECT_ERRNO(SendTo(s.get(), std::string("y"), Name4(r.get()), MSG_DONTWAIT), ENOBUFS);
  int sfd = s.get();
  auto t0 = Clock::now();
  AsyncCall call([sfd] {
    pollfd p{sfd, POLLIN, 0};
    long n = ::poll(&p, 1, 6000);
    return n == 1 ? static_cast<long>(p.revents) : -100 - n;
  });
  LetItBlock();
  EXPECT_FALSE(call.done()) << "poll returned " << MaskStr(static_cast<int>(call.rc()));
  for (int i = 0; i < 3; ++i) ASSERT_EQ(RecvWithin(r.get()).n, 1024);  // uncongest
  ASSERT_TRUE(call.WaitFor(kPromptMs + 6000));
  EXPECT_LT(ElapsedMs(t0), kPromptMs + 1000) << "not woken by the map update";
  // rds_poll reports POLLIN|POLLWRBAND; poll(2) filters revents by the
  // requested events (do_pollfd), so only POLLIN is visible here.
  EXPECT_MASK(static_cast<int>(call.rc()) & (POLLIN | POLLWRBAND), POLLIN);
}

// With RDS_CONG_MONITOR on, map updates alone never make POLLIN (§A.6: only rs_cong_notify does).
TEST_F(Poll, PollWithCongMonitorOnIgnoresCongestionUpdates) {
  Fd mon = Bound4();
  ASSERT_TRUE(mon.ok());
  ASSERT_TRUE(SetInt(mon.get(), SOL_RDS, RDS_CONG_MONITOR, 1));
  Fd s = TcpTransportSender();
  Fd r = TcpTransportReceiver(4096);
  ASSERT_TRUE(s.ok() && r.ok());
  ASSERT_TRUE(Congest(s.get(), r.get(), 4096));
  EXPECT_MASK(PollOne(mon.get(), kAllEvents, 0), kIdleMask);
}

// With RDS_CONG_MONITOR on, a pending notification makes POLLIN until recvmsg consumes it.
TEST_F(Poll, PollReportsPollinForAPendingCongestionNotification) {
  Fd s, r;
  uint16_t port = 0;
  ASSERT_NO_FATAL_FAILURE(MakeCongNotificationPending(&s, &r, &port));
  EXPECT_MASK(PollOne(s.get(), POLLIN | POLLRDNORM, 0), POLLIN | POLLRDNORM);
  ASSERT_EQ(RecvOnce(s.get(), 16, MSG_DONTWAIT, 64).n, 0);
  EXPECT_MASK(PollOne(s.get(), kAllEvents, 0), kIdleMask);
}

// §A.6: a non-empty zerocopy-cookie queue makes POLLIN|POLLRDNORM. (RDS_CONG_MONITOR is turned on
// so that a congestion-update event cannot be what makes POLLIN.)
TEST_F(Poll, PollReportsPollinForAPendingZerocopyCompletion) {
  Fd s, r;
  ASSERT_NO_FATAL_FAILURE(MakeZerocopyCompletionPending(&s, &r, 7));
  ASSERT_TRUE(SetInt(s.get(), SOL_RDS, RDS_CONG_MONITOR, 1));
  EXPECT_MASK(PollOne(s.get(), POLLIN | POLLRDNORM, kPromptMs), POLLIN | POLLRDNORM);
}

// ---- ppoll / select / pselect ------------------------------------------------------------------------

TEST_F(Poll, PpollReportsPollinWhenAMessageIsQueued) {
  ASSERT_NO_FATAL_FAILURE(SetUpPair());
  ASSERT_NO_FATAL_FAILURE(Deliver("pp"));
  pollfd p{r_.get(), POLLIN, 0};
  timespec ts{0, 0};
  sigset_t mask = SignalSet();
  EXPECT_EQ(::ppoll(&p, 1, &ts, &mask), 1);
  EXPECT_TRUE(p.revents & POLLIN);
}

TEST_F(Poll, PpollTimesOutWhenNothingArrives) {
  Fd r = Bound4();
  ASSERT_TRUE(r.ok());
  ConsumeCongestionPollEvent(r.get());
  pollfd p{r.get(), POLLIN, 0};
  timespec ts{0, 200 * 1000 * 1000};
  auto t0 = Clock::now();
  EXPECT_EQ(::ppoll(&p, 1, &ts, nullptr), 0);
  EXPECT_GE(ElapsedMs(t0), 150);
}

TEST_F(Poll, PpollIsWokenByAnArrivingMessage) {
  ASSERT_NO_FATAL_FAILURE(SetUpPair());
  ConsumeCongestionPollEvent(r_.get());
  int rfd = r_.get();
  AsyncCall call([rfd] {
    pollfd p{rfd, POLLIN, 0};
    timespec ts{6, 0};
    long n = ::ppoll(&p, 1, &ts, nullptr);
    return n == 1 ? static_cast<long>(p.revents) : -100 - n;
  });
  LetItBlock();
  EXPECT_FALSE(call.done());
  ASSERT_EQ(SendTo(s_.get(), std::string("w"), to_), 1);
  ASSERT_TRUE(call.WaitFor(kPromptMs + 6000));
  EXPECT_TRUE(call.rc() & POLLIN) << call.rc();
}

// ---- a blocked poll runs the engine itself (DESIGN.md §2.3) -----------------------------------
//
// While it sleeps, a thread blocked in poll/ppoll/select on an RDS socket runs the engine's event
// loop (shim_poll_waits_driven counts those waits); one thread at a time does, others sleep as
// before. The calls keep the kernel's signal behaviour: any handler ends them with EINTR
// (poll and select are never restarted, signal(7)), and ppoll waits with the caller's mask.

// Two threads blocked in poll on two sockets: one drives, the other sleeps; each is woken by
// its own message alone, whichever comes first.
TEST_F(Poll, TwoBlockedPollsAreEachWokenByTheirMessage) {
  ASSERT_NO_FATAL_FAILURE(SetUpPair());
  Pair q = MakePair();
  ASSERT_TRUE(q.ok());
  struct Receiver {
    int r, s;
    sockaddr_in to;
  };
  const Receiver rx[2] = {{r_.get(), s_.get(), to_}, {q.r.get(), q.s.get(), q.to}};
  auto poller = [](int fd) {
    return [fd] {
      pollfd p{fd, POLLIN, 0};
      long n = ::poll(&p, 1, 8000);
      return n == 1 ? static_cast<long>(p.revents) : -100 - n;
    };
  };
  for (int first : {1, 0}) {
    SCOPED_TRACE(first == 1 ? "the later poll woken first" : "the earlier poll woken first");
    for (const Receiver& x : rx) ConsumeCongestionPollEvent(x.r);
    AsyncCall p0(poller(rx[0].r));
    AsyncCall p1(poller(rx[1].r));
    AsyncCall* calls[2] = {&p0, &p1};
    LetItBlock();
    ASSERT_FALSE(p0.done());
    ASSERT_FALSE(p1.done());
    const int order[2] = {first, 1 - first};
    for (int k = 0; k < 2; ++k) {
      const Receiver& x = rx[order[k]];
      ASSERT_EQ(SendTo(x.s, std::string("w"), x.to), 1);
      ASSERT_TRUE(calls[order[k]]->WaitFor(kPromptMs)) << "poll " << order[k] << " stayed";
      EXPECT_TRUE(calls[order[k]]->rc() & POLLIN) << calls[order[k]]->rc();
      if (k == 0) {
        EXPECT_FALSE(calls[1 - first]->done())
            << "the other poll returned " << calls[1 - first]->rc();
      }
    }
    for (const Receiver& x : rx) ASSERT_GE(RecvWithin(x.r).n, 0);
  }
}

// poll accepts as many entries as RLIMIT_NOFILE; the driving wait's one extra (the engine's
// epoll fd) must not turn that into EINVAL.
TEST_F(Poll, PollWithAsManyEntriesAsTheFdLimitStillWaits) {
  ASSERT_NO_FATAL_FAILURE(SetUpPair());
  ConsumeCongestionPollEvent(r_.get());
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  const rlim_t n = 256;
  if (old.rlim_cur < n) GTEST_SKIP() << "RLIMIT_NOFILE below " << n;
  rlimit low = old;
  low.rlim_cur = n;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<pollfd> p(n, pollfd{-1, 0, 0});
  p[0] = {r_.get(), POLLIN, 0};
  auto t0 = Clock::now();
  int rc = ::poll(p.data(), n, 200);
  int err = errno;
  long ms = ElapsedMs(t0);
  setrlimit(RLIMIT_NOFILE, &old);
  EXPECT_EQ(rc, 0) << ErrnoName(err);
  EXPECT_GE(ms, 150);
  // One more entry than the limit is the kernel's EINVAL, as without the shim.
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  p.push_back({-1, 0, 0});
  rc = ::poll(p.data(), n + 1, 100);
  err = errno;
  setrlimit(RLIMIT_NOFILE, &old);
  EXPECT_EQ(rc, -1);
  EXPECT_EQ(err, EINVAL) << ErrnoName(err);
}

// A handler ends a blocked poll with EINTR, with or without SA_RESTART; the socket works after.
TEST_F(Poll, BlockedPollGivesEintrAfterAnyHandler) {
  RDS_SKIP_UNDER_TSAN("signal delivery");
  ASSERT_NO_FATAL_FAILURE(SetUpPair());
  ConsumeCongestionPollEvent(r_.get());
  for (bool restart : {true, false}) {
    SCOPED_TRACE(restart ? "SA_RESTART" : "no SA_RESTART");
    ScopedSignalHandler h(SIGUSR1, restart);
    ScopedAlarmRestartFlag alarm_flag(restart);  // uniform dispositions, as a driving recv needs
    int rfd = r_.get();
    ExpectEintrOnSignal(
        [rfd] {
          pollfd p{rfd, POLLIN, 0};
          return static_cast<long>(::poll(&p, 1, 6000));
        },
        1);
  }
  ASSERT_NO_FATAL_FAILURE(Deliver("after"));
  EXPECT_EQ(PollOne(r_.get(), POLLIN, 1000) & POLLIN, POLLIN);
}

// ppoll waits with the mask it is given: a signal it blocks stays pending until ppoll returns
// (then the handler runs), a signal it unblocks (blocked in the thread otherwise) ends it.
TEST_F(Poll, BlockedPpollWaitsWithTheCallersSignalMask) {
  RDS_SKIP_UNDER_TSAN("signal delivery");
  ASSERT_NO_FATAL_FAILURE(SetUpPair());
  ConsumeCongestionPollEvent(r_.get());
  ScopedSignalHandler h(SIGUSR1, /*restart=*/true);
  int rfd = r_.get();
  {
    AsyncCall call([rfd] {
      sigset_t during = SignalSet({SIGUSR1});
      pollfd p{rfd, POLLIN, 0};
      timespec ts{6, 0};
      long n = ::ppoll(&p, 1, &ts, &during);
      return n == 1 ? static_cast<long>(p.revents) : -100 - n;
    });
    LetItBlock();
    ASSERT_FALSE(call.done());
    pthread_kill(call.handle(), SIGUSR1);
    EXPECT_FALSE(call.WaitFor(400)) << "a signal blocked by ppoll's mask ended it: "
                                    << call.rc() << " " << ErrnoName(call.err());
    EXPECT_EQ(ScopedSignalHandler::count().load(), 0) << "the handler ran inside ppoll";
    ASSERT_EQ(SendTo(s_.get(), std::string("m"), to_), 1);
    ASSERT_TRUE(call.WaitFor(kPromptMs));
    EXPECT_TRUE(call.rc() & POLLIN) << call.rc();
    // Pending until ppoll restored the thread's own mask.
    for (int i = 0; i < 100 && ScopedSignalHandler::count().load() == 0; ++i) SleepMs(10);
    EXPECT_EQ(ScopedSignalHandler::count().load(), 1);
  }
  ASSERT_GE(RecvWithin(r_.get()).n, 0);
  ConsumeCongestionPollEvent(r_.get());
  // A signal the thread blocks but ppoll's mask does not ends it.
  ExpectEintrOnSignal(
      [rfd] {
        sigset_t blocked = SignalSet({SIGUSR1}), during = SignalSet();
        pthread_sigmask(SIG_BLOCK, &blocked, nullptr);
        pollfd p{rfd, POLLIN, 0};
        timespec ts{6, 0};
        return static_cast<long>(::ppoll(&p, 1, &ts, &during));
      },
      2);
}

TEST_F(Poll, SelectReportsReadableWhenAMessageIsQueued) {
  ASSERT_NO_FATAL_FAILURE(SetUpPair());
  ASSERT_NO_FATAL_FAILURE(Deliver("sel"));
  fd_set r;
  FD_ZERO(&r);
  FD_SET(r_.get(), &r);
  timeval tv{0, 0};
  EXPECT_EQ(::select(r_.get() + 1, &r, nullptr, nullptr, &tv), 1);
  EXPECT_TRUE(FD_ISSET(r_.get(), &r));
}

TEST_F(Poll, SelectIsNotReadableWhenEmptyAndTimesOut) {
  Fd r = Bound4();
  ASSERT_TRUE(r.ok());
  ConsumeCongestionPollEvent(r.get());
  fd_set rs;
  FD_ZERO(&rs);
  FD_SET(r.get(), &rs);
  timeval tv{0, 200000};
  auto t0 = Clock::now();
  EXPECT_EQ(::select(r.get() + 1, &rs, nullptr, nullptr, &tv), 0);
  EXPECT_GE(ElapsedMs(t0), 150);
  EXPECT_FALSE(FD_ISSET(r.get(), &rs));
}

TEST_F(Poll, SelectReportsWritableWhenTheSndbufHasRoom) {
  Fd s = Bound4();
  ASSERT_TRUE(s.ok());
  fd_set w;
  FD_ZERO(&w);
  FD_SET(s.get(), &w);
  timeval tv{0, 0};
  EXPECT_EQ(::select(s.get() + 1, nullptr, &w, nullptr, &tv), 1);
  EXPECT_TRUE(FD_ISSET(s.get(), &w));
}

// No exceptional condition (POLLPRI) is ever reported.
TEST_F(Poll, SelectNeverReportsAnExceptionalCondition) {
  ASSERT_NO_FATAL_FAILURE(SetUpPair());
  ASSERT_NO_FATAL_FAILURE(Deliver("e"));
  fd_set e;
  FD_ZERO(&e);
  FD_SET(r_.get(), &e);
  timeval tv{0, 0};
  EXPECT_EQ(::select(r_.get() + 1, nullptr, nullptr, &e, &tv), 0);
}

TEST_F(Poll, SelectMixesRdsAndOrdinaryDescriptors) {
  ASSERT_NO_FATAL_FAILURE(SetUpPair());
  int pfd[2];
  ASSERT_EQ(pipe(pfd), 0);
  Fd prd(pfd[0]), pwr(pfd[1]);
  ASSERT_NO_FATAL_FAILURE(Deliver("m"));
  ASSERT_EQ(::write(pwr.get(), "p", 1), 1);
  fd_set r;
  FD_ZERO(&r);
  FD_SET(r_.get(), &r);
  FD_SET(prd.get(), &r);
  timeval tv{0, 0};
  EXPECT_EQ(::select(std::max(r_.get(), prd.get()) + 1, &r, nullptr, nullptr, &tv), 2);
  EXPECT_TRUE(FD_ISSET(r_.get(), &r));
  EXPECT_TRUE(FD_ISSET(prd.get(), &r));
}

TEST_F(Poll, SelectIsWokenByAnArrivingMessage) {
  ASSERT_NO_FATAL_FAILURE(SetUpPair());
  ConsumeCongestionPollEvent(r_.get());
  int rfd = r_.get();
  AsyncCall call([rfd] {
    fd_set r;
    FD_ZERO(&r);
    FD_SET(rfd, &r);
    timeval tv{6, 0};
    long n = ::select(rfd + 1, &r, nullptr, nullptr, &tv);
    return n == 1 && FD_ISSET(rfd, &r) ? 1L : -100 - n;
  });
  LetItBlock();
  EXPECT_FALSE(call.done());
  ASSERT_EQ(SendTo(s_.get(), std::string("w"), to_), 1);
  ASSERT_TRUE(call.WaitFor(kPromptMs + 6000));
  EXPECT_EQ(call.rc(), 1);
}

TEST_F(Poll, PselectReportsReadableWhenAMessageIsQueued) {
  ASSERT_NO_FATAL_FAILURE(SetUpPair());
  ASSERT_NO_FATAL_FAILURE(Deliver("ps"));
  fd_set r;
  FD_ZERO(&r);
  FD_SET(r_.get(), &r);
  timespec ts{0, 0};
  sigset_t mask = SignalSet();
  EXPECT_EQ(::pselect(r_.get() + 1, &r, nullptr, nullptr, &ts, &mask), 1);
  EXPECT_TRUE(FD_ISSET(r_.get(), &r));
}

TEST_F(Poll, PselectTimesOutWhenNothingArrives) {
  Fd r = Bound4();
  ASSERT_TRUE(r.ok());
  ConsumeCongestionPollEvent(r.get());
  fd_set rs;
  FD_ZERO(&rs);
  FD_SET(r.get(), &rs);
  timespec ts{0, 200 * 1000 * 1000};
  EXPECT_EQ(::pselect(r.get() + 1, &rs, nullptr, nullptr, &ts, nullptr), 0);
  EXPECT_FALSE(FD_ISSET(r.get(), &rs));
}

// ---- epoll (DESIGN.md §2.3: the kernel waits on the real fd; readiness must still match) --------

class Epoll : public Poll {
 protected:
  void SetUp() override {
    Poll::SetUp();
    ep_.reset(epoll_create1(EPOLL_CLOEXEC));
    ASSERT_TRUE(ep_.ok()) << ErrnoName(errno);
    ASSERT_NO_FATAL_FAILURE(SetUpPair());
  }
  void Add(int fd, uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.fd = fd;
    ASSERT_EQ(epoll_ctl(ep_.get(), EPOLL_CTL_ADD, fd, &ev), 0) << ErrnoName(errno);
  }
  // epoll_wait for at most `ms`; returns the number of events, fills `ev`.
  int Wait(epoll_event* ev, int max, int ms) { return epoll_wait(ep_.get(), ev, max, ms); }
  // Drains any readiness present right after registration (e.g. a congestion-update event).
  void DrainInitial() {
    epoll_event ev[4];
    for (int i = 0; i < 3 && Wait(ev, 4, 0) > 0; ++i) {
    }
  }
  Fd ep_;
};

TEST_F(Epoll, EpollLevelTriggeredReportsEpollinWhileAMessageIsQueued) {
  ASSERT_NO_FATAL_FAILURE(Add(r_.get(), EPOLLIN));
  DrainInitial();
  ASSERT_EQ(SendTo(s_.get(), std::string("lt"), to_), 2);
  epoll_event ev[4];
  ASSERT_EQ(Wait(ev, 4, kPromptMs), 1);
  EXPECT_EQ(ev[0].data.fd, r_.get());
  EXPECT_TRUE(ev[0].events & EPOLLIN);
  // Level-triggered: reported again while queued.
  ASSERT_EQ(Wait(ev, 4, 0), 1);
  EXPECT_TRUE(ev[0].events & EPOLLIN);
}

TEST_F(Epoll, EpollLevelTriggeredReportsNothingAfterTheQueueIsDrained) {
  ASSERT_NO_FATAL_FAILURE(Add(r_.get(), EPOLLIN));
  DrainInitial();
  ASSERT_EQ(SendTo(s_.get(), std::string("a"), to_), 1);
  ASSERT_EQ(SendTo(s_.get(), std::string("b"), to_), 1);
  epoll_event ev[4];
  ASSERT_EQ(Wait(ev, 4, kPromptMs), 1);
  SleepMs(kSettleMs);
  ASSERT_EQ(RecvWithin(r_.get()).data, "a");
  EXPECT_EQ(Wait(ev, 4, 0), 1) << "one message is still queued";
  ASSERT_EQ(RecvWithin(r_.get()).data, "b");
  DrainInitial();  // a congestion-update event, if one came in meanwhile
  EXPECT_EQ(Wait(ev, 4, 200), 0) << "EPOLLIN with an empty queue";
}

// Edge-triggered: one event per arriving message, none while nothing new arrives.
TEST_F(Epoll, EpollEdgeTriggeredReportsOneEventPerArrival) {
  ASSERT_NO_FATAL_FAILURE(Add(r_.get(), EPOLLIN | EPOLLET));
  DrainInitial();
  epoll_event ev[4];
  ASSERT_EQ(SendTo(s_.get(), std::string("e1"), to_), 2);
  ASSERT_EQ(Wait(ev, 4, kPromptMs), 1);
  EXPECT_TRUE(ev[0].events & EPOLLIN);
  EXPECT_EQ(Wait(ev, 4, 200), 0) << "no new arrival, no new edge";
  ASSERT_EQ(SendTo(s_.get(), std::string("e2"), to_), 2);
  ASSERT_EQ(Wait(ev, 4, kPromptMs), 1) << "second arrival must give a new edge";
  EXPECT_TRUE(ev[0].events & EPOLLIN);
  EXPECT_EQ(RecvWithin(r_.get()).data, "e1");
  EXPECT_EQ(RecvWithin(r_.get()).data, "e2");
}

// The blocked wait runs the engine's event loop meanwhile (shim_epoll_waits_driven, §2.3).
TEST_F(Epoll, EpollWaitBlocksUntilAMessageArrives) {
  ASSERT_NO_FATAL_FAILURE(Add(r_.get(), EPOLLIN));
  DrainInitial();
  const uint64_t before = ReadCounter("shim_epoll_waits_driven");
  int ep = ep_.get();
  AsyncCall call([ep] {
    epoll_event ev[2];
    long n = epoll_wait(ep, ev, 2, 6000);
    return n == 1 ? static_cast<long>(ev[0].events) : -100 - n;
  });
  LetItBlock();
  ASSERT_FALSE(call.done()) << "returned " << call.rc();
  EXPECT_GT(ReadCounter("shim_epoll_waits_driven"), before) << "the blocked wait did not drive";
  ASSERT_EQ(SendTo(s_.get(), std::string("w"), to_), 1);
  ASSERT_TRUE(call.WaitFor(kPromptMs));
  EXPECT_TRUE(call.rc() & EPOLLIN) << call.rc();
}

// ---- a blocked epoll wait runs the engine itself (DESIGN.md §2.3) ----------------------------
//
// A wait on an epoll set holding an RDS socket that must block runs the engine's event loop,
// keeping epoll_wait's results, timeout and signal behaviour.

TEST_F(Epoll, DrivingEpollWaitKeepsItsTimeout) {
  ASSERT_NO_FATAL_FAILURE(Add(r_.get(), EPOLLIN));
  DrainInitial();
  const uint64_t before = ReadCounter("shim_epoll_waits_driven");
  epoll_event ev[2];
  auto t0 = Clock::now();
  EXPECT_EQ(Wait(ev, 2, 250), 0) << ErrnoName(errno);
  EXPECT_GE(ElapsedMs(t0), 200);
  EXPECT_GT(ReadCounter("shim_epoll_waits_driven"), before);
  // epoll_pwait2's nanosecond timeout too.
  timespec ts{0, 150 * 1000 * 1000};
  t0 = Clock::now();
  EXPECT_EQ(epoll_pwait2(ep_.get(), ev, 2, &ts, nullptr), 0) << ErrnoName(errno);
  EXPECT_GE(ElapsedMs(t0), 120);
}

// The wrapper reads epoll_pwait2's timeout as the kernel does: out of range EINVAL,
// unreadable EFAULT (never a crash in the wrapper).
TEST_F(Epoll, EpollPwait2RejectsBadTimeoutsAsTheKernelDoes) {
  ASSERT_NO_FATAL_FAILURE(Add(r_.get(), EPOLLIN));
  DrainInitial();
  epoll_event ev[2];
  timespec bad{0, 1000000000L};
  RDS_EXPECT_ERRNO(epoll_pwait2(ep_.get(), ev, 2, &bad, nullptr), EINVAL);
  bad = {-1, 0};
  RDS_EXPECT_ERRNO(epoll_pwait2(ep_.get(), ev, 2, &bad, nullptr), EINVAL);
  RDS_EXPECT_ERRNO(epoll_pwait2(ep_.get(), ev, 2, reinterpret_cast<const timespec*>(8), nullptr),
                   EFAULT);
}

TEST_F(Epoll, DrivingEpollWaitIsWokenByAnOrdinaryDescriptorInTheSet) {
  ASSERT_NO_FATAL_FAILURE(Add(r_.get(), EPOLLIN));
  int pfd[2];
  ASSERT_EQ(pipe(pfd), 0);
  Fd prd(pfd[0]), pwr(pfd[1]);
  ASSERT_NO_FATAL_FAILURE(Add(prd.get(), EPOLLIN));
  DrainInitial();
  int ep = ep_.get();
  AsyncCall call([ep] {
    epoll_event ev[2];
    long n = epoll_wait(ep, ev, 2, 6000);
    return n == 1 ? static_cast<long>(ev[0].data.fd) : -100 - n;
  });
  LetItBlock();
  ASSERT_FALSE(call.done());
  ASSERT_EQ(::write(pwr.get(), "p", 1), 1);
  ASSERT_TRUE(call.WaitFor(kPromptMs));
  EXPECT_EQ(call.rc(), prd.get());
}

TEST_F(Epoll, BlockedEpollWaitGivesEintrAfterAnyHandler) {
  RDS_SKIP_UNDER_TSAN("signal delivery");
  ASSERT_NO_FATAL_FAILURE(Add(r_.get(), EPOLLIN));
  DrainInitial();
  for (bool restart : {true, false}) {
    SCOPED_TRACE(restart ? "SA_RESTART" : "no SA_RESTART");
    ScopedSignalHandler h(SIGUSR1, restart);
    ScopedAlarmRestartFlag alarm_flag(restart);
    int ep = ep_.get();
    ExpectEintrOnSignal(
        [ep] {
          epoll_event ev[2];
          return static_cast<long>(epoll_wait(ep, ev, 2, 6000));
        },
        1);
  }
}

// epoll_pwait waits with the mask it is given: a signal it blocks stays pending until it returns.
TEST_F(Epoll, BlockedEpollPwaitWaitsWithTheCallersSignalMask) {
  RDS_SKIP_UNDER_TSAN("signal delivery");
  ASSERT_NO_FATAL_FAILURE(Add(r_.get(), EPOLLIN));
  DrainInitial();
  ScopedSignalHandler h(SIGUSR1, /*restart=*/true);
  int ep = ep_.get();
  AsyncCall call([ep] {
    sigset_t during = SignalSet({SIGUSR1});
    epoll_event ev[2];
    long n = epoll_pwait(ep, ev, 2, 6000, &during);
    return n == 1 ? static_cast<long>(ev[0].events) : -100 - n;
  });
  LetItBlock();
  ASSERT_FALSE(call.done());
  pthread_kill(call.handle(), SIGUSR1);
  EXPECT_FALSE(call.WaitFor(400)) << "a signal blocked by the wait's mask ended it: " << call.rc();
  EXPECT_EQ(ScopedSignalHandler::count().load(), 0);
  ASSERT_EQ(SendTo(s_.get(), std::string("m"), to_), 1);
  ASSERT_TRUE(call.WaitFor(kPromptMs));
  EXPECT_TRUE(call.rc() & EPOLLIN) << call.rc();
  for (int i = 0; i < 100 && ScopedSignalHandler::count().load() == 0; ++i) SleepMs(10);
  EXPECT_EQ(ScopedSignalHandler::count().load(), 1);
}

// Two threads wait on one edge-triggered set: the one event goes to one of them; the other keeps
// waiting for its whole timeout instead of returning 0 early.
TEST_F(Epoll, TwoWaitersOnOneSetEachGetEventsOrTheirWholeTimeout) {
  ASSERT_NO_FATAL_FAILURE(Add(r_.get(), EPOLLIN | EPOLLET));
  DrainInitial();
  int ep = ep_.get();
  auto waiter = [ep] {
    return [ep] {
      epoll_event ev[2];
      return static_cast<long>(epoll_wait(ep, ev, 2, 2500));
    };
  };
  auto t0 = Clock::now();
  AsyncCall a(waiter());
  AsyncCall b(waiter());
  LetItBlock();
  ASSERT_FALSE(a.done());
  ASSERT_FALSE(b.done());
  ASSERT_EQ(SendTo(s_.get(), std::string("one"), to_), 3);
  for (int i = 0; i < kPromptMs / 10 && !a.done() && !b.done(); ++i) SleepMs(10);
  ASSERT_TRUE(a.done() || b.done()) << "neither waiter got the event";
  AsyncCall& got = a.done() ? a : b;
  AsyncCall& other = a.done() ? b : a;
  EXPECT_EQ(got.rc(), 1) << ErrnoName(got.err());
  ASSERT_TRUE(other.WaitFor(5000));
  if (other.rc() == 0) {
    EXPECT_GE(ElapsedMs(t0), 2400) << "the other waiter returned 0 before its timeout";
  } else {
    EXPECT_EQ(other.rc(), 1) << ErrnoName(other.err());
  }
}

TEST_F(Epoll, EpollReportsEpolloutWhenTheSndbufHasRoom) {
  ASSERT_NO_FATAL_FAILURE(Add(s_.get(), EPOLLOUT));
  epoll_event ev[2];
  ASSERT_EQ(Wait(ev, 2, kPromptMs), 1);
  EXPECT_TRUE(ev[0].events & EPOLLOUT);
  EXPECT_FALSE(ev[0].events & (EPOLLHUP | EPOLLERR));
}

// A message already queued when the fd is added is reported (ep_insert polls once).
TEST_F(Epoll, EpollReportsAMessageQueuedBeforeRegistration) {
  ASSERT_NO_FATAL_FAILURE(Deliver("early"));
  ASSERT_NO_FATAL_FAILURE(Add(r_.get(), EPOLLIN));
  epoll_event ev[2];
  ASSERT_EQ(Wait(ev, 2, kPromptMs), 1);
  EXPECT_TRUE(ev[0].events & EPOLLIN);
}

}  // namespace
}  // namespace rdstest
