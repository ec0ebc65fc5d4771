// engine/path_receive.cc — what arrives on a path (kernel recv.c's
// rds_recv_incoming): data, acknowledgements, control messages, duplicate
// suppression, delivery into the destination socket.
//
// Members of Engine (engine/engine.h); engine.cc owns the thread and its state.
#include "engine/engine.h"

#include "engine/abandon.h"
#include "engine/waiter.h"
#include <signal.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include "absl/random/random.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "engine/sync.h"
#include "absl/time/clock.h"
#include "conf/settings.h"
#include "engine/bind.h"
#include "engine/cong.h"
#include "engine/direct_receive.h"
#include "engine/errors.h"
#include "engine/fault.h"
#include "engine/info.h"
#include "engine/fork.h"
#include "engine/log.h"
#include "engine/recv.h"
#include "engine/registry.h"
#include "engine/send.h"
#include "engine/share.h"
#include "engine/socket.h"
#include "engine/stats.h"
#include "engine/sys.h"
#include "engine/engine_internal.h"

namespace rds {

namespace {

// Received bytes after which a path acknowledges at once (OnPathMessage).
constexpr uint64_t kStreamAckBytes = 512 * 1024;

// A retransmission of a message delivered before its link broke (kernel
// rds_recv_incoming drops it).
bool AlreadyDelivered(const Path& p, const wire::Header& h) {
  return (h.flags & wire::kFlagRetransmitted) && h.sequence < p.next_rx_seq;
}

}  // namespace

// ---------------------------------------------------------------------------
// Receiving on a path.

void Engine::OnPathMessage(Path& p, wire::Header&& h, Payload&& payload) {
  Connection& c = p.conn;
  if (fault::Enabled() && fault::ResetAfterMessage(++p.rx_messages)) {
    // Test-only: the link breaks before this message is processed.
    p.link->Close();
    OnPathDown(p, absl::AbortedError("fault injection"));
    return;
  }
  if (h.ack != 0) OnAck(p, h.ack);
  if (control::IsHello(h)) return;  // a stray hello on an open link is ignored
  if (wire::IsShimControl(h)) {
    absl::StatusOr<control::Control> ctl = control::DecodeControl(h, payload);
    if (ctl.ok()) OnPathControl(p, *ctl);
    return;
  }
  if (wire::IsCongMap(h)) {
    stats::Inc(stats::kCongUpdateReceived);
    // Any other length is ignored, as rds_tcp_cong_recv does.
    if (h.len != wire::kCongMapBytes) return;
    if (p.relay_peer || p.node_index >= 0) {
      OnRelayCongestionMap(p, payload.data());  // a node's map, or a relayer's
    } else {
      CongestionTable::Get().SetPeerMap(c.key.ns, c.key.faddr, p.peer_pid, payload.data());
    }
    return;
  }
  if (wire::IsHandshakePing(h) || wire::IsHandshakePong(h)) {
    if (IsKernelPath(p)) OnKernelHandshake(p, h);
    return;
  }
  if (p.stale_until_pong) {
    if (h.flags & wire::kFlagRetransmitted) {
      // Sent to our previous incarnation (a node sends what it had queued
      // as soon as we connect, before it reads our new GEN_NUM): its
      // sockets are gone, and a kernel that restarted would not get it.
      stats::Inc(stats::kRecvDropOldSeq);
      return;
    }
    // Its retransmissions came first, ahead of anything it had not sent.
    p.stale_until_pong = false;
  }
  if (AlreadyDelivered(p, h)) {
    // Already delivered before the link broke (kernel rds_recv_incoming).
    stats::Inc(stats::kRecvDropOldSeq);
    ScheduleAck(p, /*urgent=*/true);
    return;
  }
  p.next_rx_seq = h.sequence + 1;
  if (p.relay_peer) {
    // A relayer's message for the node: acknowledged once the node's TCP has
    // it (OnRelayedDone).
    RelayToNode(p, h, std::move(payload));
    return;
  }
  if (IsKernelPath(p)) SyncNodeRecord(p);
  if (!AcceptData(p, h, payload)) return;
  p.rx_delivered = h.sequence;
  p.rx_unacked_packets++;
  p.rx_unacked_bytes += h.len;
  const conf::Settings& cfg = conf::Get();
  // Besides the kernel's rules: a bulk stream is acknowledged every
  // kStreamAckBytes, as TCP acknowledges the bytes under kernel rds_tcp (its
  // sender frees messages on TCP's acknowledgement): the sender's window of
  // sndbuf bytes keeps moving instead of draining and refilling.
  bool urgent =
      (h.flags & wire::kFlagAckRequired) ||
      p.rx_unacked_packets >= static_cast<uint64_t>(cfg.max_unacked_packets) ||
      p.rx_unacked_bytes >= std::min(static_cast<uint64_t>(cfg.max_unacked_bytes), kStreamAckBytes);
  ScheduleAck(p, urgent);
}

// A data message for a port with no socket in this process: `owner` is the
// registry's answer for the port.
void Engine::NotForThisProcess(Path& p, const wire::Header& h, Payload&& payload,
                               const absl::StatusOr<pid_t>& owner) {
  Connection& c = p.conn;
  if (IsKernelPath(p)) {
    if (owner.ok() && *owner > 0 && static_cast<uint32_t>(*owner) != pid_) {
      // Bound in another engine of this host: it gets the message through
      // its relay path (the node's connection is ours).
      RelayFromNode(c, static_cast<uint32_t>(*owner), h, std::move(payload));
    } else if (owner.ok() && *owner == kParkedPortOwner) {
      // A node has no notices, and counted the message delivered once TCP
      // had it: one for a socket between processes waits for its next one.
      HoldNodeMessage(c, h, std::move(payload));
    } else {
      stats::Inc(stats::kRecvDropNoSock);  // nobody bound it: the kernel drops it too
    }
    return;
  }
  if (owner.ok() && *owner != 0) {
    // The port's socket was handed to another process (engine/share.h): not
    // delivered here; the sender sends it again to the socket's next owner,
    // in order with what it sends there after (the notice goes before any
    // acknowledgement that covers this message).
    const uint64_t seq = h.sequence;
    SendControl(p, control::EncodeU64List(control::Op::kMoved, {&seq, 1}));
    return;
  }
  stats::Inc(stats::kRecvDropNoSock);
  control::Control notice;
  notice.op = control::Op::kPortUnreachable;
  notice.port = h.dport;
  SendControl(p, control::EncodeControl(notice));
}

// Delivers a data message (ping, pong or to a socket). False if the message
// was refused and must not be acknowledged (the link was reset).
bool Engine::AcceptData(Path& p, const wire::Header& h, Payload& payload) {
  Connection& c = p.conn;
  if (h.dport == 0) {
    stats::Inc(stats::kRecvPing);
    if (!conf::Get().ping_enable || h.sport == 0) return true;
    auto pong = NewMessage();
    pong->header.sport = 0;
    pong->header.dport = h.sport;
    pong->saddr = c.key.laddr;
    pong->daddr = c.key.faddr;
    stats::Inc(stats::kSendPong);
    PathSend(p, std::move(pong));
    return true;
  }
  if (!c.node_held.empty() && c.node_held.contains(h.dport)) {
    HoldNodeMessage(c, h, std::move(payload));  // behind those waiting for the port's socket
    return true;
  }
  RdsSocket* rs = Destination(p, h.dport);
  if (!rs) {
    // The registry names this process: a thread of it binds the socket (or
    // takes it over) right now, and records the port last, inside the bind
    // table's lock — looked up again, it is there.
    absl::StatusOr<pid_t> owner = c.ns->ports().Owner(c.key.laddr, h.dport);
    if (owner.ok() && static_cast<uint32_t>(*owner) == pid_) {
      p.last_destination.epoch = 0;
      rs = Destination(p, h.dport);
    }
    if (!rs) {
      NotForThisProcess(p, h, std::move(payload), owner);
      return true;
    }
  }
  auto m = NewMessage();
  // Header seen and message complete: the read that brought its end.
  const int64_t received_ns = p.link ? p.link->last_receive_ns() : 0;
  m->rx_trace[0] = m->rx_trace[1] = received_ns != 0 ? received_ns : MonotonicNs();
  m->header = h;
  m->payload = std::move(payload);
  m->saddr = c.key.faddr;
  m->daddr = c.key.laddr;
  if (DirectReceive* d = DirectReceive::LenderOf(m->payload)) {
    // Read into the buffer of the recvmsg waiting for it: handed to that call
    // alone. (Should that offer have gone meanwhile, the bytes move to a
    // buffer of their own and the message is queued as usual.)
    if (DeliverDirect(*rs, m, *d)) return true;
    m->payload = Payload(m->payload.data(), m->payload.size());
  }
  const DeliverResult delivered = Deliver(*rs, std::move(m), /*refuse_over_hard_limit=*/true);
  if (delivered == DeliverResult::kParked) {
    // Handed to another process while this message was on its way.
    NotForThisProcess(p, h, std::move(m->payload), c.ns->ports().Owner(c.key.laddr, h.dport));
    return true;
  }
  if (delivered == DeliverResult::kRefused) {
    // The peer ignores congestion and this socket's queue is far beyond its
    // rcvbuf: refuse the message (unacknowledged, so it is retransmitted
    // later) and reset the link. Memory stays bounded; nothing is lost.
    stats::Inc(stats::kShimConnDropOverload);
    log::Warn("%s: destination port %d is far over its receive buffer; resetting the link",
              p.link->Describe(), h.dport);
    p.next_rx_seq = h.sequence;  // the retransmission must be accepted
    p.link->Close();
    OnPathDown(p, absl::ResourceExhaustedError("receiver overloaded"));
    return false;
  }
  return true;
}

void Engine::Resend(Path& p, uint64_t seq) {
  Connection& c = p.conn;
  auto it = std::find_if(p.unacked.begin(), p.unacked.end(),
                         [seq](const MessagePtr& m) { return m->header.sequence == seq; });
  if (it == p.unacked.end()) return;  // acknowledged or dropped meanwhile
  MessagePtr m = std::move(*it);
  p.unacked.erase(it);
  if (m->cancelled.load()) return;
  const uint16_t port = m->header.dport;
  m->header.sequence = 0;
  m->header.ack = 0;
  m->header.flags &= static_cast<uint8_t>(~wire::kFlagRetransmitted);
  c.routes.erase(port);
  c.settling.try_emplace(port, p.peer_pid);  // more of them may come back
  // Before everything queued for the port since it was sent, after the
  // messages moved before it.
  std::deque<MessagePtr>& q = c.unresolved[port];
  size_t& front = c.moved_front[port];
  front = std::min(front, q.size());
  q.insert(q.begin() + static_cast<std::ptrdiff_t>(front), std::move(m));
  ++front;
  if (c.local) {
    RetryParkedLater(c);
  } else {
    Resolve(c, port);
  }
}

RdsSocket* Engine::Destination(Path& p, uint16_t dport) {
  auto& last = p.last_destination;
  const uint64_t epoch = BindTableEpoch();
  if (last.epoch != epoch || last.port != dport) {
    last.socket = FindBound(p.conn.ns->key(), {p.conn.key.laddr, dport});
    last.port = dport;
    last.epoch = epoch;
  }
  return last.socket.get();
}

std::optional<Payload> Engine::DirectStorage(Path& p, const wire::Header& h, PayloadFiller& filler) {
  // Data for a socket only (no pings, congestion maps, controls), and not a
  // retransmission that will be dropped as already delivered.
  if (h.dport == 0 || wire::HasExtHeaders(h) || wire::IsCongMap(h) || control::IsHello(h) ||
      wire::IsHandshakePing(h) || wire::IsHandshakePong(h)) {
    return std::nullopt;
  }
  if (AlreadyDelivered(p, h)) return std::nullopt;
  if (!p.conn.node_held.empty() && p.conn.node_held.contains(h.dport)) return std::nullopt;
  RdsSocket* rs = Destination(p, h.dport);
  if (!rs) return std::nullopt;
  rds::MutexLock lock(&rs->mu);
  // Messages already queued come first: they are the waiting call's.
  if (rs->direct == nullptr || rs->released || !rs->recv_queue.empty()) return std::nullopt;
  return rs->direct->Lend(h.len, filler);
}

void Engine::OnPathControl(Path& p, const control::Control& ctl) {
  Connection& c = p.conn;
  switch (ctl.op) {
    case control::Op::kRouteQuery: {
      control::Control reply;
      reply.op = control::Op::kRouteReply;
      reply.query_id = ctl.query_id;
      reply.port = ctl.port;
      reply.owner_pid = AnswerRouteQuery(c.ns, c.key.laddr, ctl.port);
      SendControl(p, control::EncodeControl(reply));
      return;
    }
    case control::Op::kRouteReply:
      OnRouteAnswer(c, ctl.port, ctl.owner_pid);
      return;
    case control::Op::kPortUnreachable:
      c.routes.erase(ctl.port);
      return;
    case control::Op::kAck:
      return;  // header.ack was applied on arrival
    case control::Op::kInfoData:
    case control::Op::kInfoDataPart:
      return;  // only on rdsctl/RDS_INFO query links, never on a path
    case control::Op::kArenaAnnounce:
    case control::Op::kArenaRelease:
      return;  // a same-host link consumes these itself; meaningless elsewhere
    case control::Op::kMoved: {
      absl::StatusOr<std::vector<uint64_t>> seqs = control::DecodeU64List(ctl);
      if (!seqs.ok()) return;
      for (uint64_t seq : *seqs) {
        if (p.relay_peer) {
          ReturnRelayedFromNode(p, seq);
        } else {
          Resend(p, seq);
        }
      }
      return;
    }
  }
}

}  // namespace rds
