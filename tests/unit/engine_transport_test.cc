// tests/unit/engine_transport_test.cc — the real engine over the in-memory
// transport (mem_transport.h), the test playing the peer engine of another
// host: route query, path hello, data, acknowledgements, retransmission after
// a link loss, a peer restart, and links the peer opens. This is what a new
// transport must carry (DESIGN.md §2.6), shown without any socket.
//
// Its own binary: the transports must be registered before the engine starts.
#include <arpa/inet.h>
#include <linux/rds.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "engine/bind.h"
#include "engine/cong.h"
#include "engine/control.h"
#include "engine/engine.h"
#include "engine/errors.h"
#include "engine/readiness.h"
#include "engine/recv.h"
#include "engine/send.h"
#include "engine/socket.h"
#include "engine/sockopt.h"
#include "engine/stats.h"
#include "gtest/gtest.h"
#include "tests/unit/mem_transport.h"

namespace rds::testing {
namespace {

MemNetwork* network = nullptr;

constexpr uint32_t kPeerPid = 4242;
constexpr uint32_t kPeerGen = 0x1234;

RdsAddr V4(const char* s) {
  in_addr a;
  inet_pton(AF_INET, s, &a);
  return RdsAddr::FromV4(a);
}

sockaddr_in Sin(const char* addr, uint16_t port) {
  sockaddr_in sin = {};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(port);
  inet_pton(AF_INET, addr, &sin.sin_addr);
  return sin;
}

// An RDS socket of this process, bound to 127.0.0.1:port.
struct TestSocket {
  std::shared_ptr<RdsSocket> rs;
  int fd = -1;

  // `tcp`: SO_RDS_TRANSPORT TCP before the bind (on 127.0.0.1 the socket
  // would otherwise take the loopback transport, which never marks congestion).
  explicit TestSocket(uint16_t port, bool tcp = false) {
    absl::StatusOr<BackingFd> b = CreateBackingFd(0);
    EXPECT_TRUE(b.ok()) << b.status();
    absl::StatusOr<std::shared_ptr<NetNs>> ns = NetNs::OfCurrentThread();
    EXPECT_TRUE(ns.ok()) << ns.status();
    absl::StatusOr<std::shared_ptr<RdsSocket>> s = CreateSocket(b->id, *ns, b->fd, false);
    EXPECT_TRUE(s.ok()) << s.status();
    rs = *s;
    fd = b->fd;
    if (tcp) {
      int t = RDS_TRANS_TCP;
      absl::Status set = SetSockOpt(*rs, fd, SOL_RDS, SO_RDS_TRANSPORT, &t, sizeof(t));
      EXPECT_TRUE(set.ok()) << set;
    }
    sockaddr_in sin = Sin("127.0.0.1", port);
    absl::Status bound = Bind(*rs, reinterpret_cast<sockaddr*>(&sin), sizeof(sin));
    EXPECT_TRUE(bound.ok()) << bound;
  }
  ~TestSocket() {
    // As the preload layer's close(): the descriptor first, then the RDS
    // close (a socket whose backing descriptor lives elsewhere is parked).
    close(fd);
    Release(*rs);
  }

  absl::StatusOr<size_t> SendTo(const char* addr, uint16_t port, const std::string& data) {
    sockaddr_in to = Sin(addr, port);
    iovec iov = {const_cast<char*>(data.data()), data.size()};
    msghdr msg = {};
    msg.msg_name = &to;
    msg.msg_namelen = sizeof(to);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    return SendMsg(*rs, msg, 0);
  }

  // Waits (bounded) for one message; its payload and source.
  std::string Receive(sockaddr_in* from) {
    char buf[256];
    iovec iov = {buf, sizeof(buf)};
    msghdr msg = {};
    msg.msg_name = from;
    msg.msg_namelen = sizeof(*from);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    absl::StatusOr<size_t> n = RecvMsg(*rs, fd, msg, 0);
    if (!n.ok()) return "error: " + n.status().ToString();
    return std::string(buf, *n);
  }
};

bool IsData(const Record& r) {
  return !control::IsHello(r.header) && !wire::IsShimControl(r.header) &&
         !wire::IsCongMap(r.header) && r.header.dport != 0;
}

std::string Text(const Record& r) { return std::string(r.payload.begin(), r.payload.end()); }

// The peer's half of a link hello exchange: the engine's hello on `ch`, then
// the peer's reply.
control::Hello ExpectHello(MemChannel& ch) {
  std::optional<Record> r = ch.Next();
  EXPECT_TRUE(r.has_value()) << "no hello";
  if (!r) return {};
  MessagePtr m = NewMessage();
  m->header = r->header;
  m->payload = Payload(r->payload.data(), r->payload.size());
  absl::StatusOr<control::Hello> h = control::DecodeHello(m->header, m->payload);
  EXPECT_TRUE(h.ok()) << h.status();
  return h.ok() ? *h : control::Hello{};
}

void Reply(MemChannel& ch, control::HelloResult result, uint32_t answer_pid, uint32_t gen,
           uint64_t ack) {
  control::Hello r;
  r.kind = control::HelloKind::kReply;
  r.result = result;
  r.pid = kPeerPid;
  r.gen = gen;
  r.uid = getuid();
  r.answer_pid = answer_pid;
  r.ack = ack;
  ch.Deliver(control::EncodeHello(r));
}

void Ack(MemChannel& ch, uint64_t seq) {
  control::Control c;
  c.op = control::Op::kAck;
  MessagePtr m = control::EncodeControl(c);
  m->header.ack = seq;
  ch.Deliver(std::move(m));
}

// The path's messages the engine holds for retransmission.
size_t Unacked(const char* faddr) {
  size_t n = 0;
  for (const PathInfo& p : Engine::Get().Snapshot(std::nullopt)) {
    if (p.faddr == V4(faddr)) n += p.retrans.size();
  }
  return n;
}

bool WaitUnacked(const char* faddr, size_t want) {
  for (int i = 0; i < 500; ++i) {
    if (Unacked(faddr) == want) return true;
    usleep(10 * 1000);
  }
  return false;
}

// The engine's next link to `faddr` (other tests' retries may still be queued).
std::optional<Attempt> NextAttemptTo(const char* faddr) {
  std::optional<Attempt> a;
  do {
    a = network->NextAttempt();
  } while (a && a->target.faddr != V4(faddr));
  return a;
}

// Answers the engine's route query for the host of `attempt` with kPeerPid,
// then accepts its path link; returns the path's channel.
std::shared_ptr<MemChannel> AnswerQueryAndAccept(const char* faddr, uint16_t port, uint64_t ack = 0,
                                                 uint32_t gen = kPeerGen) {
  std::optional<Attempt> q = NextAttemptTo(faddr);
  EXPECT_TRUE(q.has_value()) << "no route query";
  if (!q) return nullptr;
  EXPECT_EQ(q->target.peer_pid, 0u);
  q->channel->Connected();
  control::Hello query = ExpectHello(*q->channel);
  EXPECT_EQ(query.kind, control::HelloKind::kQuery);
  EXPECT_EQ(query.query_port, port);
  Reply(*q->channel, control::HelloResult::kAnswer, kPeerPid, gen, 0);
  EXPECT_TRUE(q->channel->WaitClosedByEngine()) << "the query link stays open";

  std::optional<Attempt> a = NextAttemptTo(faddr);
  EXPECT_TRUE(a.has_value()) << "no path link";
  if (!a) return nullptr;
  EXPECT_EQ(a->target.peer_pid, kPeerPid);
  a->channel->Connected();
  control::Hello link = ExpectHello(*a->channel);
  EXPECT_EQ(link.kind, control::HelloKind::kLink);
  EXPECT_EQ(link.target_pid, kPeerPid);
  Reply(*a->channel, control::HelloResult::kAccept, 0, gen, ack);
  return a->channel;
}

TEST(EngineOverTransport, RoutesSendsAcknowledgesAndReceives) {
  TestSocket s(4000);
  ASSERT_TRUE(s.SendTo("10.99.0.2", 5000, "hello").ok());
  std::shared_ptr<MemChannel> ch = AnswerQueryAndAccept("10.99.0.2", 5000);
  ASSERT_NE(ch, nullptr);
  EXPECT_GE(network->served(), 1) << "bind serves the namespace over every transport";

  // The congestion map first on a new link, then the data, in sequence.
  std::optional<Record> first = ch->Next();
  ASSERT_TRUE(first.has_value());
  EXPECT_TRUE(wire::IsCongMap(first->header));
  std::optional<Record> data = ch->NextWhere(IsData);
  ASSERT_TRUE(data.has_value());
  EXPECT_EQ(Text(*data), "hello");
  EXPECT_EQ(data->header.sport, 4000);
  EXPECT_EQ(data->header.dport, 5000);
  EXPECT_EQ(data->header.sequence, 1u);
  EXPECT_TRUE(WaitUnacked("10.99.0.2", 1));

  // The peer's acknowledgement frees it.
  Ack(*ch, 1);
  EXPECT_TRUE(WaitUnacked("10.99.0.2", 0));

  // The peer sends: the socket receives, and the engine acknowledges.
  wire::Header h;
  h.sequence = 1;
  h.sport = 5000;
  h.dport = 4000;
  h.flags = wire::kFlagAckRequired;
  ch->Deliver(h, {'w', 'o', 'r', 'l', 'd'});
  sockaddr_in from = {};
  EXPECT_EQ(s.Receive(&from), "world");
  EXPECT_EQ(ntohs(from.sin_port), 5000);
  char addr[INET_ADDRSTRLEN];
  EXPECT_STREQ(inet_ntop(AF_INET, &from.sin_addr, addr, sizeof(addr)), "10.99.0.2");
  std::optional<Record> ack = ch->NextWhere([](const Record& r) { return r.header.ack >= 1; });
  EXPECT_TRUE(ack.has_value()) << "the engine did not acknowledge";
}

TEST(EngineOverTransport, RetransmitsAfterLinkLossAndSkipsWhatThePeerHas) {
  TestSocket s(4001);
  ASSERT_TRUE(s.SendTo("10.99.0.3", 5001, "one").ok());
  ASSERT_TRUE(s.SendTo("10.99.0.3", 5001, "two").ok());
  std::shared_ptr<MemChannel> ch = AnswerQueryAndAccept("10.99.0.3", 5001);
  ASSERT_NE(ch, nullptr);
  std::optional<Record> one = ch->NextWhere(IsData);
  std::optional<Record> two = ch->NextWhere(IsData);
  ASSERT_TRUE(one && two);
  EXPECT_EQ(Text(*two), "two");
  EXPECT_TRUE(WaitUnacked("10.99.0.3", 2));

  // The link fails before any acknowledgement; the engine reconnects, and
  // the peer says in its accept that it delivered the first.
  ch->Fail(absl::UnavailableError("cable pulled"));
  std::optional<Attempt> again = NextAttemptTo("10.99.0.3");
  ASSERT_TRUE(again.has_value()) << "no reconnect";
  EXPECT_EQ(again->target.peer_pid, kPeerPid);
  again->channel->Connected();
  EXPECT_EQ(ExpectHello(*again->channel).kind, control::HelloKind::kLink);
  Reply(*again->channel, control::HelloResult::kAccept, 0, kPeerGen, /*ack=*/1);

  std::optional<Record> resent = again->channel->NextWhere(IsData);
  ASSERT_TRUE(resent.has_value()) << "nothing retransmitted";
  EXPECT_EQ(Text(*resent), "two");
  EXPECT_EQ(resent->header.sequence, two->header.sequence);
  EXPECT_TRUE(resent->header.flags & wire::kFlagRetransmitted);
  Ack(*again->channel, resent->header.sequence);
  EXPECT_TRUE(WaitUnacked("10.99.0.3", 0));
  // Nothing else: "one" is not sent twice.
  EXPECT_FALSE(again->channel->NextWhere(IsData, absl::Milliseconds(200)).has_value());
}

TEST(EngineOverTransport, PeerRestartDropsWhatTheOldPeerWasSent) {
  TestSocket s(4002);
  ASSERT_TRUE(s.SendTo("10.99.0.4", 5002, "for the old peer").ok());
  std::shared_ptr<MemChannel> ch = AnswerQueryAndAccept("10.99.0.4", 5002);
  ASSERT_NE(ch, nullptr);
  ASSERT_TRUE(ch->NextWhere(IsData).has_value());
  ch->Fail(absl::UnavailableError("peer restarted"));
  std::optional<Attempt> again = NextAttemptTo("10.99.0.4");
  ASSERT_TRUE(again.has_value());
  again->channel->Connected();
  ExpectHello(*again->channel);
  // A new generation: the old sequence space and what was sent into it are gone.
  Reply(*again->channel, control::HelloResult::kAccept, 0, kPeerGen + 1, 0);
  EXPECT_FALSE(again->channel->NextWhere(IsData, absl::Milliseconds(300)).has_value());
  EXPECT_TRUE(WaitUnacked("10.99.0.4", 0));

  ASSERT_TRUE(s.SendTo("10.99.0.4", 5002, "for the new one").ok());
  std::optional<Record> fresh = again->channel->NextWhere(IsData);
  ASSERT_TRUE(fresh.has_value());
  EXPECT_EQ(Text(*fresh), "for the new one");
  EXPECT_EQ(fresh->header.sequence, 2u) << "the sender's sequence space goes on";
}

// The peer's port moves to another engine of its host (a socket handed to
// another process) while three messages are on their way: the peer hands
// back the first (control kMoved) before the other two, and the sender sends
// a fourth meanwhile. The new owner gets all four in order: nothing goes
// there until the old owner has handed back or acknowledged every message
// for that port.
TEST(EngineOverTransport, MovedMessagesGoToTheNewOwnerAheadOfLaterOnes) {
  TestSocket s(4006);
  for (const char* text : {"m1", "m2", "m3"}) ASSERT_TRUE(s.SendTo("10.99.0.7", 5006, text).ok());
  std::shared_ptr<MemChannel> old_owner = AnswerQueryAndAccept("10.99.0.7", 5006);
  ASSERT_NE(old_owner, nullptr);
  std::vector<uint64_t> seqs;
  for (int i = 0; i < 3; ++i) {
    std::optional<Record> r = old_owner->NextWhere(IsData);
    ASSERT_TRUE(r.has_value());
    seqs.push_back(r->header.sequence);
  }
  auto moved = [&](uint64_t seq) {
    old_owner->Deliver(control::EncodeU64List(control::Op::kMoved, {&seq, 1}));
  };
  // The engine asks again where the port is, on the path it has (as often
  // as it needs to): the port is at the peer's next engine.
  auto answer_query = [&] {
    std::optional<Record> query = old_owner->NextWhere([](const Record& r) {
      if (!wire::IsShimControl(r.header)) return false;
      MessagePtr m = NewMessage();
      m->header = r.header;
      m->payload = Payload(r.payload.data(), r.payload.size());
      absl::StatusOr<control::Control> c = control::DecodeControl(m->header, m->payload);
      return c.ok() && c->op == control::Op::kRouteQuery;
    });
    if (!query) return false;
    control::Control answer;
    answer.op = control::Op::kRouteReply;
    answer.port = 5006;
    answer.owner_pid = kPeerPid + 1;
    old_owner->Deliver(control::EncodeControl(answer));
    return true;
  };
  moved(seqs[0]);
  ASSERT_TRUE(answer_query()) << "no route query after kMoved";
  ASSERT_TRUE(s.SendTo("10.99.0.7", 5006, "m4").ok());
  usleep(300 * 1000);  // time enough to send m1 and m4 to the new owner too early
  moved(seqs[1]);
  moved(seqs[2]);
  ASSERT_TRUE(answer_query()) << "no route query after the second kMoved";
  std::optional<Attempt> a = NextAttemptTo("10.99.0.7");
  ASSERT_TRUE(a.has_value()) << "no link to the new owner";
  EXPECT_EQ(a->target.peer_pid, kPeerPid + 1);
  a->channel->Connected();
  ExpectHello(*a->channel);
  Reply(*a->channel, control::HelloResult::kAccept, 0, kPeerGen + 7, 0);
  for (const char* want : {"m1", "m2", "m3", "m4"}) {
    std::optional<Record> r = a->channel->NextWhere(IsData);
    ASSERT_TRUE(r.has_value()) << "missing " << want;
    EXPECT_EQ(Text(*r), want);
  }
}

TEST(EngineOverTransport, AcceptsALinkThePeerOpens) {
  TestSocket s(4003);
  absl::StatusOr<std::shared_ptr<NetNs>> ns = NetNs::OfCurrentThread();
  ASSERT_TRUE(ns.ok());
  std::shared_ptr<MemChannel> ch = network->OpenToEngine(*ns);
  ASSERT_NE(ch, nullptr);
  control::Hello h;
  h.kind = control::HelloKind::kLink;
  h.pid = kPeerPid;
  h.gen = kPeerGen;
  h.uid = getuid();
  h.from_addr = V4("10.99.0.5");
  h.to_addr = V4("127.0.0.1");
  h.target_pid = static_cast<uint32_t>(getpid());
  ch->Deliver(control::EncodeHello(h));
  control::Hello reply = ExpectHello(*ch);
  EXPECT_EQ(reply.kind, control::HelloKind::kReply);
  EXPECT_EQ(reply.result, control::HelloResult::kAccept);
  EXPECT_EQ(reply.pid, static_cast<uint32_t>(getpid()));

  wire::Header d;
  d.sequence = 1;
  d.sport = 6000;
  d.dport = 4003;
  ch->Deliver(d, {'h', 'i'});
  sockaddr_in from = {};
  EXPECT_EQ(s.Receive(&from), "hi");
  EXPECT_EQ(ntohs(from.sin_port), 6000);

  // A message for a port nobody bound: the peer is told.
  d.sequence = 2;
  d.dport = 4999;
  ch->Deliver(d, {'x'});
  // (Acknowledgements may come first, as their timer fires.)
  auto decode = [](const Record& r) {
    MessagePtr m = NewMessage();
    m->header = r.header;
    m->payload = Payload(r.payload.data(), r.payload.size());
    return control::DecodeControl(m->header, m->payload);
  };
  std::optional<Record> notice = ch->NextWhere([&decode](const Record& r) {
    if (!wire::IsShimControl(r.header)) return false;
    absl::StatusOr<control::Control> c = decode(r);
    return c.ok() && c->op != control::Op::kAck;
  });
  ASSERT_TRUE(notice.has_value());
  absl::StatusOr<control::Control> c = decode(*notice);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->op, control::Op::kPortUnreachable);
  EXPECT_EQ(c->port, 4999);
}

TEST(EngineOverTransport, RefusedHostDropsItsMessages) {
  TestSocket s(4004);
  const uint64_t dropped = stats::Get(stats::kShimSendDropNoRoute);
  ASSERT_TRUE(s.SendTo("10.99.0.6", 5004, "nobody").ok());
  std::optional<Attempt> q = NextAttemptTo("10.99.0.6");
  ASSERT_TRUE(q.has_value());
  // Nobody serves that host: the query's connection is refused, and the
  // message is dropped as a kernel host drops one for a port nobody bound.
  q->channel->Fail(absl::NotFoundError("refused"));
  for (int i = 0; i < 500 && stats::Get(stats::kShimSendDropNoRoute) == dropped; ++i) {
    usleep(10 * 1000);
  }
  EXPECT_EQ(stats::Get(stats::kShimSendDropNoRoute), dropped + 1);
  // The host is asked again for the next message, not left waiting.
  ASSERT_TRUE(s.SendTo("10.99.0.6", 5004, "again").ok());
  std::optional<Attempt> again = NextAttemptTo("10.99.0.6");
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->target.peer_pid, 0u);
}

// ---------------------------------------------------------------------------
// A kernel RDS node as the peer (kernel-rds.md §C.6–§C.9, §E): the test plays
// rds_tcp.

wire::Header CongMapHeader() {
  wire::Header h;
  h.flags = wire::kFlagCongBitmap;
  return h;
}

std::vector<uint8_t> EmptyCongMap() { return std::vector<uint8_t>(wire::kCongMapBytes, 0); }

bool IsShimOnly(const Record& r) { return control::IsHello(r.header) || wire::IsShimControl(r.header); }

// A node's handshake ping or pong with NPATHS `npaths` (and SPORT_IDX: a 7.0+ node).
wire::Header HandshakeHeader(bool pong, uint64_t seq, uint16_t npaths, bool sport_idx) {
  wire::Header h;
  h.sport = pong ? 0 : wire::kProbePort;
  h.dport = pong ? wire::kProbePort : 0;
  h.sequence = seq;
  wire::ExtWriter ext(&h);
  ext.Npaths(npaths);
  if (sport_idx) ext.SportIdx();
  return h;
}

// Everything the engine wrote to the node, until nothing came for `quiet`.
std::vector<Record> Drain(MemChannel& ch, absl::Duration quiet = absl::Milliseconds(100)) {
  std::vector<Record> out;
  while (std::optional<Record> r = ch.Next(quiet)) out.push_back(std::move(*r));
  return out;
}

TEST(EngineWithKernelNode, SmallerAddressConnectsHandshakesAndFreesOnTcpAck) {
  TestSocket s(4100);
  ASSERT_TRUE(s.SendTo("192.168.99.2", 5100, "to the kernel").ok());
  // The engine asks the host which engine owns the port; a kernel node
  // answers a connection with its congestion map instead.
  std::optional<Attempt> a = NextAttemptTo("192.168.99.2");
  ASSERT_TRUE(a.has_value());
  a->channel->Connected();
  ASSERT_TRUE(a->channel->Next().has_value());  // the shim's hello, a handshake ping to the node
  a->channel->Deliver(CongMapHeader(), EmptyCongMap());

  // (Each record waited for: the engine may be slow, under a sanitizer on a busy machine.)
  std::vector<Record> sent;
  for (int i = 0; i < 2; ++i) {
    std::optional<Record> r = a->channel->Next();
    ASSERT_TRUE(r.has_value()) << "record " << i << " not sent";
    sent.push_back(std::move(*r));
  }
  EXPECT_TRUE(Drain(*a->channel).empty()) << "data before the number of paths was agreed";
  for (const Record& r : sent) EXPECT_FALSE(IsShimOnly(r));
  EXPECT_TRUE(wire::IsCongMap(sent[0].header)) << "the congestion map goes first";
  EXPECT_TRUE(wire::IsHandshakePing(sent[1].header));
  wire::ExtHeaders ext = wire::ParseExtHeaders(sent[1].header);
  // Automatic: one path until the node shows that it maps paths by source port.
  EXPECT_EQ(ext.npaths, std::optional<uint16_t>(1)) << "NPATHS 1 or 8, nothing else";
  EXPECT_TRUE(ext.gen_num.has_value() && *ext.gen_num != 0);
  EXPECT_TRUE(ext.sport_idx);
  EXPECT_FALSE(ext.shim_hello);
  EXPECT_TRUE(a->channel->reports_transport_acks());

  // Port 4100 is not path 0's in 8: its message waits for the number of
  // paths (the node's answer; a 6.x node's has no SPORT_IDX: one path).
  a->channel->Deliver(HandshakeHeader(/*pong=*/true, 1, 8, false));
  std::optional<Record> first = a->channel->Next();
  ASSERT_TRUE(first.has_value()) << "the waiting message was not sent";
  sent = {*first};
  EXPECT_EQ(Text(*first), "to the kernel");
  EXPECT_EQ(first->header.sequence, 2u) << "after the ping's";

  // The node's handshake ping is answered with a pong; its data arrives.
  a->channel->Deliver(HandshakeHeader(/*pong=*/false, 2, 8, false));
  std::optional<Record> pong = a->channel->Next();
  ASSERT_TRUE(pong.has_value());
  EXPECT_TRUE(wire::IsHandshakePong(pong->header));
  EXPECT_EQ(wire::ParseExtHeaders(pong->header).npaths, std::optional<uint16_t>(1));
  wire::Header d;
  d.sequence = 3;
  d.sport = 5100;
  d.dport = 4100;
  a->channel->Deliver(d, {'k', 'e', 'r'});
  sockaddr_in from = {};
  EXPECT_EQ(s.Receive(&from), "ker");

  // Nothing freed until TCP acknowledges; no shim acknowledgement or
  // control is ever written to a node.
  EXPECT_TRUE(WaitUnacked("192.168.99.2", 3));
  a->channel->TransportAcked(pong->header.sequence);
  EXPECT_TRUE(WaitUnacked("192.168.99.2", 0));
  for (const Record& r : Drain(*a->channel, absl::Milliseconds(50))) {
    EXPECT_FALSE(IsShimOnly(r)) << "a shim-only message was sent to a kernel node";
  }

  // The connection drops with a message unacknowledged: the engine (the
  // smaller address) connects again and sends it with its sequence and
  // RETRANSMITTED, after a new congestion map and handshake — once the node's
  // congestion map shows that the node took the connection (a node that
  // still holds an old one resets the new one after its TCP acknowledged
  // what arrived: written earlier, it would count as delivered).
  ASSERT_TRUE(s.SendTo("192.168.99.2", 5100, "again").ok());
  std::optional<Record> again = a->channel->NextWhere(IsData);
  ASSERT_TRUE(again.has_value());
  a->channel->Fail(absl::UnavailableError("reset"));
  std::optional<Attempt> re = NextAttemptTo("192.168.99.2");
  ASSERT_TRUE(re.has_value()) << "the smaller address must reconnect";
  re->channel->Connected();
  EXPECT_TRUE(Drain(*re->channel, absl::Milliseconds(100)).empty())
      << "written before the node took the connection";
  re->channel->Deliver(CongMapHeader(), EmptyCongMap());
  std::vector<Record> resent = Drain(*re->channel);
  ASSERT_GE(resent.size(), 3u);
  EXPECT_TRUE(wire::IsCongMap(resent[0].header));
  bool found = false;
  for (const Record& r : resent) {
    EXPECT_FALSE(IsShimOnly(r));
    if (IsData(r) && Text(r) == "again") {
      found = true;
      EXPECT_EQ(r.header.sequence, again->header.sequence);
      EXPECT_TRUE(r.header.flags & wire::kFlagRetransmitted);
    }
  }
  EXPECT_TRUE(found) << "the unacknowledged message was not sent again";
}

TEST(EngineWithKernelNode, LargerAddressWaitsForTheNodeToConnect) {
  TestSocket s(4101);
  // 10.99.1.5 < 127.0.0.1: the node is the client of every connection.
  ASSERT_TRUE(s.SendTo("10.99.1.5", 5101, "wait for it").ok());
  std::optional<Attempt> a = NextAttemptTo("10.99.1.5");
  ASSERT_TRUE(a.has_value());
  a->channel->Connected();
  a->channel->Fail(absl::UnavailableError("reset by the node"));  // its answer to a larger peer

  absl::StatusOr<std::shared_ptr<NetNs>> ns = NetNs::OfCurrentThread();
  ASSERT_TRUE(ns.ok());
  RdsEndpoint local{V4("127.0.0.1"), 16385}, peer{V4("10.99.1.5"), 40000};
  std::shared_ptr<MemChannel> ch = network->OpenToEngine(*ns, Link::Endpoints{local, peer});
  ASSERT_NE(ch, nullptr);
  ch->Deliver(CongMapHeader(), EmptyCongMap());
  ch->Deliver(HandshakeHeader(/*pong=*/true, 1, 8, false));  // one path (a 6.x node)
  std::optional<Record> data = ch->NextWhere(IsData);
  ASSERT_TRUE(data.has_value()) << "the waiting message did not go on the node's connection";
  EXPECT_EQ(Text(*data), "wait for it");
  EXPECT_TRUE(ch->reports_transport_acks());
}

// A socket closed right after sending to a node that rejected our poke: the
// host is there (its listener took the connection) and connects back, so the
// message is not one a closed socket leaves for an unreachable host (DESIGN.md
// §3.3): it goes, whether the reset came before or after we saw the connection.
TEST(EngineWithKernelNode, AClosedSocketsMessageWaitsForANodeThatRejectedThePoke) {
  const struct {
    const char* node;
    bool seen_connected;
  } cases[] = {{"10.99.1.10", true}, {"10.99.1.11", false}};
  for (const auto& k : cases) {
    SCOPED_TRACE(k.node);
    const uint64_t dropped = stats::Get(stats::kShimSendDropCancelled);
    std::optional<Attempt> a;
    {
      TestSocket s(4103);
      ASSERT_TRUE(s.SendTo(k.node, 5103, "sent, then closed").ok());
      a = NextAttemptTo(k.node);
      ASSERT_TRUE(a.has_value());
    }  // closed while its message waits for the route query
    if (k.seen_connected) {
      a->channel->Connected();
      a->channel->Fail(absl::UnavailableError("read: reset by the node"));
    } else {
      a->channel->Fail(absl::AbortedError("connect: accepted, then reset"));
    }
    // The retry (after its back-off) shows the failure was taken in.
    ASSERT_TRUE(NextAttemptTo(k.node).has_value());

    absl::StatusOr<std::shared_ptr<NetNs>> ns = NetNs::OfCurrentThread();
    ASSERT_TRUE(ns.ok());
    RdsEndpoint local{V4("127.0.0.1"), 16385}, peer{V4(k.node), 40000};
    std::shared_ptr<MemChannel> ch = network->OpenToEngine(*ns, Link::Endpoints{local, peer});
    ASSERT_NE(ch, nullptr);
    ch->Deliver(CongMapHeader(), EmptyCongMap());
    ch->Deliver(HandshakeHeader(/*pong=*/true, 1, 1, false));
    std::optional<Record> data = ch->NextWhere(IsData);
    ASSERT_TRUE(data.has_value()) << "the closed socket's message was dropped";
    EXPECT_EQ(Text(*data), "sent, then closed");
    EXPECT_EQ(stats::Get(stats::kShimSendDropCancelled), dropped);
  }
}

TEST(EngineWithKernelNode, APokeFromALargerNodeIsAnsweredByConnecting) {
  TestSocket s(4102);
  absl::StatusOr<std::shared_ptr<NetNs>> ns = NetNs::OfCurrentThread();
  ASSERT_TRUE(ns.ok());
  // 192.168.99.9 > 127.0.0.1: its connection closes before any message.
  RdsEndpoint local{V4("127.0.0.1"), 16385}, peer{V4("192.168.99.9"), 40001};
  std::shared_ptr<MemChannel> poke = network->OpenToEngine(*ns, Link::Endpoints{local, peer});
  ASSERT_NE(poke, nullptr);
  poke->Fail(absl::UnavailableError("closed by the node"));
  // The node resets the first (its own connection was still closing): the
  // engine tries again, since a node pokes only once.
  std::optional<Attempt> refused = NextAttemptTo("192.168.99.9");
  ASSERT_TRUE(refused.has_value()) << "no connection back to the node";
  refused->channel->Connected();
  refused->channel->Fail(absl::UnavailableError("reset by the node"));
  std::optional<Attempt> back = NextAttemptTo("192.168.99.9");
  ASSERT_TRUE(back.has_value()) << "no second connection back to the node";
  EXPECT_EQ(back->target.peer_pid, 0u);
  // The engine asks what the host is (a shim would answer the hello); the
  // node answers the connection with its congestion map, and gets ours.
  back->channel->Connected();
  back->channel->Deliver(CongMapHeader(), EmptyCongMap());
  std::optional<Record> first = back->channel->NextWhere([](const Record& r) {
    return !control::IsHello(r.header);
  });
  ASSERT_TRUE(first.has_value());
  EXPECT_TRUE(wire::IsCongMap(first->header));
  // The node's message for our socket arrives on it.
  wire::Header d;
  d.sequence = 1;
  d.sport = 7000;
  d.dport = 4102;
  back->channel->Deliver(d, {'p', 'o', 'k', 'e'});
  sockaddr_in from = {};
  EXPECT_EQ(s.Receive(&from), "poke");
}

// A node's path, up: the node at `faddr` (larger than 127.0.0.1) answered the
// engine's connection with its congestion map. Returns the channel.
std::shared_ptr<MemChannel> KernelPathTo(TestSocket& s, const char* faddr, uint16_t port) {
  EXPECT_TRUE(s.SendTo(faddr, port, "hello node").ok());
  std::optional<Attempt> a = NextAttemptTo(faddr);
  EXPECT_TRUE(a.has_value());
  if (!a) return nullptr;
  a->channel->Connected();
  a->channel->Deliver(CongMapHeader(), EmptyCongMap());
  // A 6.x node's answer to the handshake: one path.
  a->channel->Deliver(HandshakeHeader(/*pong=*/true, 1, 8, false));
  EXPECT_TRUE(a->channel->NextWhere(IsData).has_value());
  return a->channel;
}

// A node frees its path only between one poke and the next (kernel-rds.md
// §C.7): while its application sends, a reconnect on a back-off timer almost
// never gets in. A poke makes the engine connect at once, however long its
// back-off (seen: reconnects locked out for minutes).
TEST(EngineWithKernelNode, APokeMakesTheEngineConnectAtOnceWhateverItsBackOff) {
  TestSocket s(4103);
  std::shared_ptr<MemChannel> up = KernelPathTo(s, "192.168.99.21", 7000);
  ASSERT_NE(up, nullptr);
  up->Fail(absl::UnavailableError("reset"));
  // Reset by the node each time: the back-off grows to its limit (1 s).
  for (int i = 0; i < 12; ++i) {
    std::optional<Attempt> a = NextAttemptTo("192.168.99.21");
    ASSERT_TRUE(a.has_value()) << "no reconnect " << i;
    a->channel->Fail(absl::UnavailableError("reset by the node"));
  }
  absl::StatusOr<std::shared_ptr<NetNs>> ns = NetNs::OfCurrentThread();
  ASSERT_TRUE(ns.ok());
  RdsEndpoint local{V4("127.0.0.1"), 16385}, peer{V4("192.168.99.21"), 40002};
  std::shared_ptr<MemChannel> poke = network->OpenToEngine(*ns, Link::Endpoints{local, peer});
  ASSERT_NE(poke, nullptr);
  poke->Fail(absl::UnavailableError("closed by the node"));
  std::optional<Attempt> now = network->NextAttempt(absl::Milliseconds(100));
  ASSERT_TRUE(now.has_value()) << "the poke was not answered at once";
  EXPECT_EQ(now->target.faddr, V4("192.168.99.21"));
  // Taken: the path is up again (and stays so: no attempts leak into the
  // tests that follow).
  now->channel->Connected();
  now->channel->Deliver(CongMapHeader(), EmptyCongMap());
  EXPECT_TRUE(now->channel->NextWhere([](const Record& r) { return wire::IsCongMap(r.header); })
                  .has_value());
}

// A node pokes only while its path is down. A poke while our connection has
// been up a while says the node gave that connection up (its reset lost on
// the way, or our TCP stuck retransmitting into it): the engine drops it and
// connects again at once, and what the node never acknowledged goes again,
// flagged. A poke right after the path came up is a late echo of the node's
// poking before it took our connection, and changes nothing.
TEST(EngineWithKernelNode, APokeWhileThePathIsUpReplacesTheConnectionTheNodeGaveUp) {
  TestSocket s(4104);
  std::shared_ptr<MemChannel> up = KernelPathTo(s, "192.168.99.22", 7000);
  ASSERT_NE(up, nullptr);
  absl::StatusOr<std::shared_ptr<NetNs>> ns = NetNs::OfCurrentThread();
  ASSERT_TRUE(ns.ok());
  RdsEndpoint local{V4("127.0.0.1"), 16385};
  auto poke = [&](uint16_t port) {
    std::shared_ptr<MemChannel> p =
        network->OpenToEngine(*ns, Link::Endpoints{local, {V4("192.168.99.22"), port}});
    ASSERT_NE(p, nullptr);
    p->Fail(absl::UnavailableError("closed by the node"));
  };
  poke(40003);
  EXPECT_FALSE(network->NextAttempt(absl::Milliseconds(200)).has_value())
      << "a poke just after the path came up replaced it";
  EXPECT_FALSE(up->ClosedByEngine());

  absl::SleepFor(absl::Seconds(3));  // the engine's kPokeAfterUp
  ASSERT_TRUE(s.SendTo("192.168.99.22", 7000, "never acknowledged").ok());
  ASSERT_TRUE(up->NextWhere(IsData).has_value());
  poke(40004);
  EXPECT_TRUE(up->WaitClosedByEngine(absl::Seconds(1))) << "the dead connection was kept";
  std::optional<Attempt> again = network->NextAttempt(absl::Milliseconds(500));
  ASSERT_TRUE(again.has_value()) << "the poke was not answered at once";
  EXPECT_EQ(again->target.faddr, V4("192.168.99.22"));
  again->channel->Connected();
  again->channel->Deliver(CongMapHeader(), EmptyCongMap());
  for (const char* text : {"hello node", "never acknowledged"}) {  // the node's TCP acked neither
    std::optional<Record> resent = again->channel->NextWhere(IsData);
    ASSERT_TRUE(resent.has_value()) << "what the node never acknowledged was not sent again";
    EXPECT_EQ(Text(*resent), text);
    EXPECT_TRUE(resent->header.flags & wire::kFlagRetransmitted);
  }
  EXPECT_GE(stats::Get(stats::kShimNodeConnGivenUp), 1u);
}

// Multipath (kernel-rds.md §C.7–§C.9): with a node that numbers paths by
// source port (SPORT_IDX, 7.0+), the automatic setting uses its 8 paths.

// Which of `channels` (by index) carries the next data message, waiting up to
// a second for each in turn; -1 if none.
int ChannelOfNextData(const std::vector<std::shared_ptr<MemChannel>>& channels, Record* got) {
  for (int round = 0; round < 1000; ++round) {
    for (size_t i = 0; i < channels.size(); ++i) {
      if (!channels[i]) continue;
      if (std::optional<Record> r = channels[i]->NextWhere(IsData, absl::Milliseconds(1))) {
        if (got) *got = *r;
        return static_cast<int>(i);
      }
    }
  }
  return -1;
}

TEST(EngineWithKernelNode, SmallerAddressOpensEightPathsToANodeThatMapsBySourcePort) {
  const char* node = "192.168.99.5";
  std::vector<std::unique_ptr<TestSocket>> socks;
  for (uint16_t port = 4200; port < 4208; ++port) socks.push_back(std::make_unique<TestSocket>(port));
  ASSERT_TRUE(socks[0]->SendTo(node, 5200, "first").ok());
  std::optional<Attempt> a = NextAttemptTo(node);
  ASSERT_TRUE(a.has_value());
  a->channel->Connected();
  ASSERT_TRUE(a->channel->Next().has_value());  // the shim's hello, a handshake ping to the node
  a->channel->Deliver(CongMapHeader(), EmptyCongMap());
  std::optional<Record> ping = a->channel->NextWhere([](const Record& r) {
    return wire::IsHandshakePing(r.header);
  });
  ASSERT_TRUE(ping.has_value());
  EXPECT_EQ(wire::ParseExtHeaders(ping->header).npaths, std::optional<uint16_t>(1));
  // Its answer shows SPORT_IDX: the engine offers 8, and they are agreed on
  // the answer to that.
  a->channel->Deliver(HandshakeHeader(/*pong=*/true, 1, 8, true));
  ping = a->channel->NextWhere([](const Record& r) { return wire::IsHandshakePing(r.header); });
  ASSERT_TRUE(ping.has_value());
  EXPECT_EQ(wire::ParseExtHeaders(ping->header).npaths, std::optional<uint16_t>(8));
  EXPECT_TRUE(wire::ParseExtHeaders(ping->header).sport_idx);
  a->channel->Deliver(HandshakeHeader(/*pong=*/true, 2, 8, true));

  // Paths 1..7, one at a time and in order, each from a source port that
  // says its index; a path is up once the node sends on it.
  std::vector<std::shared_ptr<MemChannel>> paths = {a->channel};
  for (int i = 1; i < 8; ++i) {
    std::optional<Attempt> p = NextAttemptTo(node);
    ASSERT_TRUE(p.has_value()) << "path " << i << " was not opened";
    EXPECT_EQ(p->target.node_path, i);
    EXPECT_EQ(network->NextAttempt(absl::Milliseconds(50)).has_value(), false)
        << "path " << i + 1 << " opened before path " << i << " was up";
    p->channel->Connected();
    p->channel->Deliver(CongMapHeader(), EmptyCongMap());
    paths.push_back(p->channel);
  }

  // Each port's messages go on one path, always the same; the 8 ports here
  // use every path (the engine's port hash spreads them).
  // The first message (its port's path was not known before the answer) too.
  Record got;
  const int first_path = ChannelOfNextData(paths, &got);
  ASSERT_GE(first_path, 0) << "the first message was not sent";
  EXPECT_EQ(Text(got), "first");
  std::set<int> used;
  std::map<uint16_t, int> path_of;
  for (size_t k = 0; k < socks.size(); ++k) {
    ASSERT_TRUE(socks[k]->SendTo(node, 5200, "one").ok());
    const int first = ChannelOfNextData(paths, &got);
    ASSERT_GE(first, 0) << "port " << 4200 + k << ": nothing sent";
    EXPECT_EQ(got.header.sport, 4200 + k);
    ASSERT_TRUE(socks[k]->SendTo(node, 5200, "two").ok());
    EXPECT_EQ(ChannelOfNextData(paths, &got), first) << "port " << 4200 + k << " changed path";
    if (k == 0) {
      EXPECT_EQ(first, first_path);
    }
    used.insert(first);
    path_of[got.header.sport] = first;
  }
  EXPECT_EQ(used.size(), 8u);
  // A burst from all of them at once (the engine batches a stream and reuses
  // a route for the next message to the same destination): still each
  // port's path.
  for (int round = 0; round < 10; ++round) {
    for (auto& sock : socks) ASSERT_TRUE(sock->SendTo(node, 5200, "burst").ok());
  }
  for (int n = 0; n < 10 * static_cast<int>(socks.size()); ++n) {
    const int on = ChannelOfNextData(paths, &got);
    ASSERT_GE(on, 0) << "burst message " << n << " not sent";
    EXPECT_EQ(on, path_of[got.header.sport]) << "port " << got.header.sport << " on another path";
  }
}

TEST(EngineWithKernelNode, LargerAddressTakesANodesPathsByTheirSourcePorts) {
  const char* node = "10.99.1.7";  // < 127.0.0.1: the node connects every path
  TestSocket s(4210);
  ASSERT_TRUE(s.SendTo(node, 5210, "waits").ok());
  std::optional<Attempt> a = NextAttemptTo(node);
  ASSERT_TRUE(a.has_value());
  a->channel->Connected();
  a->channel->Fail(absl::UnavailableError("reset by the node"));  // a poke
  absl::StatusOr<std::shared_ptr<NetNs>> ns = NetNs::OfCurrentThread();
  ASSERT_TRUE(ns.ok());
  RdsEndpoint local{V4("127.0.0.1"), 16385};
  auto open_path = [&](uint16_t peer_port) {
    return network->OpenToEngine(*ns, Link::Endpoints{local, {V4(node), peer_port}});
  };
  std::vector<std::shared_ptr<MemChannel>> paths(8);
  paths[0] = open_path(40000);
  paths[0]->Deliver(CongMapHeader(), EmptyCongMap());
  std::optional<Record> ping =
      paths[0]->NextWhere([](const Record& r) { return wire::IsHandshakePing(r.header); });
  ASSERT_TRUE(ping.has_value());
  paths[0]->Deliver(HandshakeHeader(/*pong=*/true, 1, 8, true));
  ping = paths[0]->NextWhere([](const Record& r) { return wire::IsHandshakePing(r.header); });
  ASSERT_TRUE(ping.has_value());
  EXPECT_EQ(wire::ParseExtHeaders(ping->header).npaths, std::optional<uint16_t>(8));
  paths[0]->Deliver(HandshakeHeader(/*pong=*/true, 2, 8, true));
  // The node opens the others (in any order: their source ports say which
  // is which), sending nothing on them first.
  for (int i = 7; i >= 1; --i) paths[i] = open_path(static_cast<uint16_t>(40000 + i));
  Record got;
  const int k = ChannelOfNextData(paths, &got);
  ASSERT_GE(k, 0) << "the waiting message was not sent";
  EXPECT_EQ(Text(got), "waits");
  // Two paths drop; the node opens them again, the later path first: the
  // unacknowledged message goes again on its own path, found by the port.
  const int j = k == 1 ? 2 : 1;
  paths[k]->Fail(absl::UnavailableError("reset"));
  paths[j]->Fail(absl::UnavailableError("reset"));
  usleep(50 * 1000);
  const int later = std::max(j, k), earlier = std::min(j, k);
  paths[later] = open_path(static_cast<uint16_t>(40008 + later));
  paths[earlier] = open_path(static_cast<uint16_t>(40008 + earlier));
  std::vector<std::shared_ptr<MemChannel>> reopened(8);
  reopened[k] = paths[k];
  reopened[j] = paths[j];
  EXPECT_EQ(ChannelOfNextData(reopened, &got), k);
  EXPECT_EQ(Text(got), "waits");
  EXPECT_TRUE(got.header.flags & wire::kFlagRetransmitted);
}

// kernel-rds.md §C.5, §E.9: a message is a duplicate only if it is flagged
// RETRANSMITTED and below the path's next expected sequence; anything else is
// accepted and sets the next expected one, even backwards (a restarted
// sender's numbering); a congestion map (sequence 0) never counts.
TEST(EngineWithKernelNode, DropsOnlyRetransmittedOldSequences) {
  TestSocket s(4103);
  std::shared_ptr<MemChannel> ch = KernelPathTo(s, "192.168.99.3", 5103);
  ASSERT_NE(ch, nullptr);
  auto deliver = [&](uint64_t seq, bool retransmitted, const std::string& text) {
    wire::Header h;
    h.sequence = seq;
    h.sport = 5103;
    h.dport = 4103;
    if (retransmitted) h.flags = wire::kFlagRetransmitted;
    ch->Deliver(h, std::vector<uint8_t>(text.begin(), text.end()));
  };
  sockaddr_in from = {};
  const uint64_t dropped = stats::Get(stats::kRecvDropOldSeq);
  deliver(5, false, "five");
  EXPECT_EQ(s.Receive(&from), "five");
  deliver(5, true, "five again");       // a retransmission of what arrived: dropped
  deliver(4, true, "four again");       // older still: dropped
  ch->Deliver(CongMapHeader(), EmptyCongMap());  // sequence 0, outside the sequence space
  deliver(6, true, "six");              // retransmitted but new: accepted
  EXPECT_EQ(s.Receive(&from), "six");
  deliver(2, false, "two");             // not retransmitted: accepted, next expected is 3
  EXPECT_EQ(s.Receive(&from), "two");
  deliver(2, true, "two again");        // now below it: dropped
  deliver(3, true, "three");            // at it: accepted
  EXPECT_EQ(s.Receive(&from), "three");
  EXPECT_EQ(stats::Get(stats::kRecvDropOldSeq) - dropped, 3u);
}

// Receive congestion is decided under the socket's lock and announced after
// it, by whichever thread changed the accounting: the engine (or a driving
// thread) delivering, a recvmsg taking a message. Announcements may run in
// the other order than the decisions — a delivery that made the socket
// congested is preempted before announcing, and a recvmsg that emptied the
// queue meanwhile announces "clear" first. The port's bit must still end as
// the socket's state: left set, it blocked a sender for good (the receiver,
// its queue empty, believed itself uncongested and never cleared it again;
// integration/soak test 6 hung so after 231 of 1000 messages).
TEST(EngineOverTransport, ReceiveCongestionEndsAsTheSocketsStateWhateverTheAnnouncementOrder) {
  constexpr uint16_t kPort = 4010;
  TestSocket rx(kPort, /*tcp=*/true);
  TestSocket tx(4011);
  RdsSocket& rs = *rx.rs;
  CongestionTable& cong = CongestionTable::Get();
  const NetNsKey ns = rs.ns->key();
  const RdsAddr addr = V4("127.0.0.1");
  // A same-process sender's view: a non-blocking send fails with ENOBUFS
  // while the port is congested.
  auto send_nonblocking = [&] {
    sockaddr_in to = Sin("127.0.0.1", kPort);
    char b = 'x';
    iovec iov = {&b, 1};
    msghdr msg = {};
    msg.msg_name = &to;
    msg.msg_namelen = sizeof(to);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    return SendMsg(*tx.rs, msg, MSG_DONTWAIT);
  };
  // The accounting as Deliver and RecvMsg change it: queued bytes past the
  // receive buffer, then all taken.
  auto decide = [&](bool over) {
    rds::MutexLock lock(&rs.mu);
    rs.rcv_bytes = over ? static_cast<size_t>(rs.RdsRcvbuf()) + 1 : 0;
    return ReceiveCongestionChangeLocked(rs);
  };

  // In order: congested, then clear.
  std::optional<ReceiveCongestionChange> on = decide(true);
  ASSERT_TRUE(on.has_value());
  EXPECT_TRUE(on->congested);
  PublishReceiveCongestion(rs, *on);
  EXPECT_TRUE(cong.IsCongested(ns, addr, kPort));
  absl::StatusOr<size_t> r = send_nonblocking();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(ErrnoOf(r.status()), ENOBUFS);
  std::optional<ReceiveCongestionChange> off = decide(false);
  ASSERT_TRUE(off.has_value());
  EXPECT_FALSE(off->congested);
  PublishReceiveCongestion(rs, *off);
  EXPECT_FALSE(cong.IsCongested(ns, addr, kPort));

  // The race: decided congested then clear, announced clear then congested.
  on = decide(true);
  off = decide(false);
  ASSERT_TRUE(on.has_value() && off.has_value());
  PublishReceiveCongestion(rs, *off);
  PublishReceiveCongestion(rs, *on);
  {
    rds::MutexLock lock(&rs.mu);
    EXPECT_FALSE(rs.congested);
  }
  EXPECT_FALSE(cong.IsCongested(ns, addr, kPort))
      << "the port stays congested under a socket with nothing queued";
  r = send_nonblocking();
  EXPECT_TRUE(r.ok()) << r.status();
}

// A node's congestion map is honoured: a bit set for a port makes a
// non-blocking send to it fail with ENOBUFS until a map clears it (§B.4).
TEST(EngineWithKernelNode, HonoursTheNodesCongestionMap) {
  TestSocket s(4104);
  std::shared_ptr<MemChannel> ch = KernelPathTo(s, "192.168.99.4", 5104);
  ASSERT_NE(ch, nullptr);
  std::vector<uint8_t> map = EmptyCongMap();
  map[5104 / 8] |= static_cast<uint8_t>(1u << (5104 % 8));  // little-endian bit order
  ch->Deliver(CongMapHeader(), map);
  auto send_nonblocking = [&] {
    sockaddr_in to = Sin("192.168.99.4", 5104);
    char b = 'x';
    iovec iov = {&b, 1};
    msghdr msg = {};
    msg.msg_name = &to;
    msg.msg_namelen = sizeof(to);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    return SendMsg(*s.rs, msg, MSG_DONTWAIT);
  };
  absl::StatusOr<size_t> r;
  for (int i = 0; i < 500; ++i) {
    r = send_nonblocking();
    if (!r.ok()) break;
    usleep(10 * 1000);
  }
  ASSERT_FALSE(r.ok()) << "the node's congestion bit was ignored";
  EXPECT_EQ(ErrnoOf(r.status()), ENOBUFS);
  ch->Deliver(CongMapHeader(), EmptyCongMap());
  for (int i = 0; i < 500; ++i) {
    r = send_nonblocking();
    if (r.ok()) break;
    usleep(10 * 1000);
  }
  EXPECT_TRUE(r.ok()) << r.status();
}

}  // namespace
}  // namespace rds::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // A run directory of its own, and the transports, before the engine starts.
  char dir[] = "/tmp/rds-engine-test.XXXXXX";
  if (mkdtemp(dir) == nullptr) return 2;
  setenv("RDS_PRELOAD_RUNDIR", dir, 1);
  static rds::testing::MemNetwork net;
  rds::testing::network = &net;
  rds::SetTransportFactoryForTest(net.Factory());
  const int rc = RUN_ALL_TESTS();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  // The engine thread runs on: leave without destructors racing it.
  _exit(rc);
}
