// engine/kernel_relay.cc — one engine per host talks to a kernel RDS node:
// claiming the host-wide node connection (engine/kernel_node.h), relaying
// the other engines' traffic to and from the node through its owner, and
// taking the connection over when the owner goes (DESIGN.md §3.5).
//
// Roles, per Connection (namespace, laddr, node address):
//  * owner: holds the record's claim; its node paths (NodePathKey) are the TCP
//    connections to the node; each relaying engine has a path keyed by its
//    pid (`relay_peer`);
//  * relayer: its node path 0 is a same-host link to the owner
//    (`node_owner`), an ordinary shim path (sequence, acknowledgements)
//    whose acknowledgement means that the node's TCP has the message; the
//    owner puts each message on the node path of its port.
//
// Members of Engine (engine/engine.h); engine.cc owns the thread and its state.
#include "engine/engine.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "conf/settings.h"
#include "engine/cong.h"
#include "engine/bind.h"
#include "engine/log.h"
#include "engine/recv.h"
#include "engine/send.h"
#include "engine/registry.h"
#include "engine/socket.h"
#include "engine/stats.h"

namespace rds {

bool Engine::IsKernelPath(const Path& p) {
  return p.node_index >= 0 && !p.conn.relaying();
}

NodeRecord* Engine::NodeRecordOf(Connection& c, bool create) {
  if (c.node_record) return c.node_record.get();
  absl::StatusOr<std::unique_ptr<NodeRecord>> r =
      NodeRecord::Open(c.ns->ports().dir(), c.key.laddr, c.key.faddr, create);
  if (!r.ok()) {
    if (!absl::IsNotFound(r.status())) log::Warn("kernel node record: %s", r.status().ToString());
    return nullptr;
  }
  c.node_record = *std::move(r);
  return c.node_record.get();
}

bool Engine::IsKnownNode(const std::shared_ptr<NetNs>& ns, const RdsAddr& laddr,
                         const RdsAddr& faddr) {
  auto it = connections_.find(ConnKey{ns->key(), laddr, faddr});
  if (it != connections_.end() && (it->second->kernel_peer || it->second->node_record)) {
    return true;
  }
  // No Connection of ours holds the record (its POSIX locks would go with
  // any descriptor of the file we close): a look is harmless.
  return NodeRecord::Open(ns->ports().dir(), laddr, faddr, /*create=*/false).ok();
}

bool Engine::FindNodeOwner(Connection& c) {
  if (c.local || c.relaying()) return c.relaying();
  if (c.node_record && c.node_record->owned()) return false;
  NodeRecord* r = NodeRecordOf(c, /*create=*/false);
  if (r == nullptr) return false;
  const pid_t owner = r->OtherOwner();
  // 1: a holder in another pid namespace, whose engine socket we cannot name.
  if (owner <= 1) return false;
  RelayThrough(c, static_cast<uint32_t>(owner));
  return true;
}

void Engine::CloseNodePathLinks(Path& p) {
  std::shared_ptr<Link> link = std::move(p.link);
  std::shared_ptr<Link> connecting = std::move(p.connecting);
  p.link.reset();
  p.connecting.reset();
  if (link) link->Close();
  if (connecting) connecting->Close();
  if (p.retry_timer) {
    loop_.Cancel(p.retry_timer);
    p.retry_timer = 0;
  }
  p.backoff = absl::ZeroDuration();
  p.last_destination = {};
  ReturnUnackedToBacklog(p);
}

void Engine::RelayThrough(Connection& c, uint32_t owner) {
  if (c.relaying() && c.node_owner == owner) return;
  log::Info("%s -> %s: a kernel RDS node whose connection engine %d of this host holds; "
            "relaying through it",
            c.key.laddr.ToString(), c.key.faddr.ToString(), owner);
  c.kernel_peer = true;
  c.node_owner = owner;
  if (c.node_record) c.node_record->Join();
  c.probes_left = 0;
  if (c.query_link) {
    c.query_link->Close();
    c.query_link.reset();
  }
  if (c.query_timer) {
    loop_.Cancel(c.query_timer);
    c.query_timer = 0;
  }
  c.querying.clear();
  Path& p = GetPath(c, kKernelNodePid, /*connect=*/false);
  CloseNodePathLinks(p);
  p.peer_gen = 0;  // the owner engine's generation from now on, not the node's
  // Our other node paths' messages go through the owner too, each port's in
  // its order (a port's messages were all on one path).
  for (int i = 1; i < kNodePathsMax; ++i) {
    auto it = c.paths.find(NodePathKey(i));  // (erased below)
    if (it == c.paths.end()) continue;
    Path& q = *it->second;
    CloseNodePathLinks(q);
    std::deque<MessagePtr> moved;
    moved.swap(q.backlog);
    for (MessagePtr& m : moved) {
      m->header.flags &= static_cast<uint8_t>(~wire::kFlagRetransmitted);
      PathSend(p, std::move(m));
    }
    if (q.ack_timer) loop_.Cancel(q.ack_timer);
    Bury(std::move(it->second));
    c.paths.erase(it);
  }
  Connection* cp = &c;
  loop_.Defer([this, cp] {
    ResolvePending(*cp);
    Path& node = GetPath(*cp, kKernelNodePid, /*connect=*/false);
    if (!node.backlog.empty() && !node.link && !node.connecting && !node.retry_timer) {
      ConnectPath(node);
    }
  });
}

// A socket bound on the connection's address that processes before this one
// held (a fork's parent, the image before an exec, an SCM_RIGHTS sender: its
// port is kept by an open-file lock, engine/share.h) means the host's RDS
// state toward the node never ended, even if no engine that used the record
// is left: a kernel host changes its generation only when its module is
// reloaded, and what the node still holds is for that socket.
bool Engine::HoldsOlderSocketOn(const Connection& c) {
  for (const std::shared_ptr<RdsSocket>& rs : AllLiveSockets()) {
    if (rs->ns != c.ns || rs->remote.load(std::memory_order_acquire)) continue;
    rds::MutexLock lock(&rs->mu);
    if (!rs->released && rs->port_fd >= 0 && rs->bound && rs->bound->addr == c.key.laddr) {
      return true;
    }
  }
  return false;
}

bool Engine::ClaimKernelNode(Connection& c) {
  if (c.handed_on) return false;  // the connection went on in another process
  NodeRecord* r = NodeRecordOf(c, /*create=*/true);
  if (r == nullptr) return true;  // no shared record: this engine acts alone (logged)
  if (r->owned()) return true;
  for (int attempt = 0; attempt < 2; ++attempt) {
    bool continued = false;
    if (r->TryClaim(&continued, HoldsOlderSocketOn(c))) {
      BecomeNodeOwner(c, continued);
      return true;
    }
    const pid_t owner = r->OtherOwner();
    if (owner > 1) {
      RelayThrough(c, static_cast<uint32_t>(owner));
      return false;
    }
    if (owner == 1) break;
  }
  log::Warn("%s -> %s: the kernel node's connection is held by an engine this process cannot "
            "reach (another pid namespace?); using a connection of its own",
            c.key.laddr.ToString(), c.key.faddr.ToString());
  return true;
}

void Engine::BecomeNodeOwner(Connection& c, bool continued, bool from_record) {
  NodeRecord& r = *c.node_record;
  NodeRecord::State& s = r.state();
  const bool was_relaying = c.relaying();
  c.kernel_peer = true;
  c.node_owner = 0;
  Path& p = GetPath(c, kKernelNodePid, /*connect=*/false);
  if (was_relaying) CloseNodePathLinks(p);
  if (!continued) {
    r.NewIncarnation(gen_);
    p.stale_until_pong = true;
    if (!was_relaying) {
      // A new incarnation of paths we may have used alone before (the
      // record's file was made again): it starts where the paths are.
      s.node_gen.store(p.peer_gen, std::memory_order_relaxed);
      s.npaths.store(static_cast<uint32_t>(c.node_npaths), std::memory_order_relaxed);
      s.node_sport_idx.store(c.node_sport_idx, std::memory_order_relaxed);
      for (auto& [key, q] : c.paths) {
        if (q->node_index >= 0) SyncNodeRecord(*q);
      }
    }
  }
  log::Info("%s -> %s: this engine holds the kernel node's connection now (%s incarnation, "
            "generation %08x)",
            c.key.laddr.ToString(), c.key.faddr.ToString(), continued ? "continuing its" : "a new",
            s.gen.load());
  if (!was_relaying && !from_record) return;
  // The node's paths as the old owner left them.
  c.node_npaths = static_cast<int>(
      std::min<uint32_t>(s.npaths.load(std::memory_order_relaxed), kNodePathsMax));
  c.node_sport_idx = s.node_sport_idx.load(std::memory_order_relaxed) != 0;
  c.npaths_advertised = c.node_npaths > 1 ? kNodePathsMax : c.node_npaths;
  c.pings_unanswered.clear();
  const uint32_t node_gen = s.node_gen.load(std::memory_order_relaxed);
  for (int i = 0; i < std::max(c.node_npaths, 1); ++i) {
    Path& q = GetPath(c, NodePathKey(i), /*connect=*/false);
    NodeRecord::PathState& ps = r.path(i);
    q.peer_gen = node_gen;
    q.next_rx_seq = ps.next_rx_seq.load(std::memory_order_relaxed);
    q.rx_delivered = q.rx_acked = 0;
    q.next_tx_seq = std::max<uint64_t>(ps.next_tx_seq.load(std::memory_order_relaxed), 1);
  }
  if (continued) StartTakeover(c, r.previous_owner());
  // What we relayed through the dead owner and it had not confirmed: in the
  // node's sequence spaces now. A message the node has is done; one it may
  // have goes again under the path and sequence the old owner gave it; the
  // rest are new messages.
  std::deque<MessagePtr> backlog;
  backlog.swap(p.backlog);
  for (MessagePtr& m : backlog) {
    Connection::Takeover::NodeSeq at;
    switch (TakeoverFate(c, pid_, m->header.sequence, &at)) {
      case TakeoverResult::kDelivered:
        ReleaseSendSpace(*m);
        continue;
      case TakeoverResult::kResend:
        m->header.sequence = at.second;
        m->header.flags |= wire::kFlagRetransmitted;
        GetPath(c, NodePathKey(at.first), /*connect=*/false).backlog.push_back(std::move(m));
        continue;
      case TakeoverResult::kNew:
        m->header.flags &= static_cast<uint8_t>(~wire::kFlagRetransmitted);
        SendToNode(c, std::move(m));
        continue;
    }
  }
  for (auto& [key, q] : c.paths) {
    if (q->node_index >= 0) SyncNodeRecord(*q);
  }
  MaybeEndTakeoverHold(c);
}

void Engine::StartTakeover(Connection& c, uint32_t previous_owner) {
  NodeRecord& r = *c.node_record;
  auto t = std::make_unique<Connection::Takeover>();
  absl::flat_hash_map<uint32_t, bool> alive;
  uint64_t unconfirmed = 0;
  for (int i = 0; i < kNodePathsMax; ++i) {
    NodeRecord::PathState& ps = r.path(i);
    const uint64_t next = ps.next_tx_seq.load(std::memory_order_relaxed);
    if (next == 0) continue;  // never used
    t->acked[i] = ps.acked_seq.load(std::memory_order_relaxed);
    unconfirmed += next - 1 > t->acked[i] ? next - 1 - t->acked[i] : 0;
    for (uint64_t seq = next > NodeRecord::kSlots ? next - NodeRecord::kSlots : 1; seq < next;
         ++seq) {
      std::optional<std::pair<uint32_t, uint64_t>> slot = r.SlotOf(i, seq);
      // The old owner's own messages died with it.
      if (!slot || slot->first == previous_owner || slot->first == 0) continue;
      t->slots[*slot] = {i, seq};
      if (seq <= t->acked[i]) continue;
      auto [it, fresh] = alive.try_emplace(slot->first, false);
      if (fresh) {
        it->second = slot->first == pid_ ||
                     kill(static_cast<pid_t>(slot->first), 0) == 0 || errno == EPERM;
      }
      if (it->second) t->waiting.insert({i, seq});
    }
  }
  log::Info("%s -> %s: taking over from engine %d: %llu node messages unconfirmed, %zu of them "
            "from engines alive",
            c.key.laddr.ToString(), c.key.faddr.ToString(), previous_owner,
            static_cast<unsigned long long>(unconfirmed), t->waiting.size());
  t->holding = !t->waiting.empty();
  Connection* cp = &c;
  if (t->holding) {
    for (auto& [key, p] : c.paths) {
      if (p->node_index >= 0) p->tx_held = true;
    }
    // The node paths stay closed meanwhile (ConnectPath, AdoptKernelLink).
    t->timer = loop_.After(kTakeoverHold, [this, cp] {
      cp->takeover->timer = 0;
      log::Warn("%s -> %s: %zu unconfirmed messages were not sent again within %lld ms of the "
                "takeover; if they come later they go as new messages",
                cp->key.laddr.ToString(), cp->key.faddr.ToString(),
                cp->takeover->waiting.size(),
                static_cast<long long>(absl::ToInt64Milliseconds(kTakeoverHold)));
      cp->takeover->waiting.clear();
      MaybeEndTakeoverHold(*cp);
    });
  }
  c.takeover = std::move(t);
  // Which relayed message took which sequence matters as long as relayers
  // may still send what the old owner had: not for ever.
  loop_.After(kTakeoverMemory, [this, cp] {
    if (cp->takeover && !cp->takeover->holding) cp->takeover.reset();
  });
}

Engine::TakeoverResult Engine::TakeoverFate(Connection& c, uint32_t pid, uint64_t relay_seq,
                                            Connection::Takeover::NodeSeq* at) {
  if (!c.takeover) return TakeoverResult::kNew;
  auto it = c.takeover->slots.find(std::make_pair(pid, relay_seq));
  if (it == c.takeover->slots.end()) return TakeoverResult::kNew;
  if (it->second.second <= c.takeover->acked[it->second.first]) return TakeoverResult::kDelivered;
  if (c.takeover->waiting.erase(it->second) == 0) {
    // The hold is over: its place in the sequence is gone. Sent as new (the
    // node may have had it: a possible duplicate, said once per takeover).
    log::Warn("%s -> %s: a message relayed before the takeover came after its hold; sent "
              "again as a new message",
              c.key.laddr.ToString(), c.key.faddr.ToString());
    return TakeoverResult::kNew;
  }
  *at = it->second;
  return TakeoverResult::kResend;
}

void Engine::MaybeEndTakeoverHold(Connection& c) {
  if (!c.takeover || !c.takeover->holding || !c.takeover->waiting.empty()) return;
  c.takeover->holding = false;
  if (c.takeover->timer) {
    loop_.Cancel(c.takeover->timer);
    c.takeover->timer = 0;
  }
  // Sent again in each path's sequence order, ahead of what is new (every
  // new message took a later sequence).
  for (auto& [key, p] : c.paths) {
    if (p->node_index < 0) continue;
    p->tx_held = false;
    std::deque<MessagePtr> backlog;
    backlog.swap(p->backlog);
    std::stable_sort(backlog.begin(), backlog.end(), [](const MessagePtr& a, const MessagePtr& b) {
      return a->header.sequence < b->header.sequence;
    });
    for (MessagePtr& m : backlog) Transmit(*p, std::move(m));  // back to the backlog if down
  }
  Path* p = NodePathOf(c);
  if (p != nullptr && !p->link && !p->connecting && !p->retry_timer) ConnectPath(*p);
}

bool Engine::NodePathHeld(const Connection& c) const {
  return c.takeover != nullptr && c.takeover->holding;
}

void Engine::SyncNodeRecord(Path& p) {
  NodeRecord* r = p.conn.node_record.get();
  if (r == nullptr || !r->owned() || p.node_index < 0) return;
  NodeRecord::PathState& ps = r->path(p.node_index);
  ps.next_tx_seq.store(p.next_tx_seq, std::memory_order_relaxed);
  ps.next_rx_seq.store(p.next_rx_seq, std::memory_order_relaxed);
  r->state().node_gen.store(p.peer_gen, std::memory_order_relaxed);
}

uint32_t Engine::NodeGeneration(const Connection& c) const {
  return c.node_record ? c.node_record->state().gen.load(std::memory_order_relaxed) : gen_;
}

void Engine::OnRelayOwnerGone(Path& p) {
  Connection& c = p.conn;
  NodeRecord* r = c.node_record.get();
  if (r == nullptr) {
    DropPath(p, "the kernel node's connection has no record");
    return;
  }
  const pid_t owner = r->OtherOwner();
  if (owner > 1 && static_cast<uint32_t>(owner) != c.node_owner) {
    RelayThrough(c, static_cast<uint32_t>(owner));
    return;
  }
  if (owner > 1) {
    // Still locked: the owner is exiting (its lock goes with its last
    // descriptor), or alive and not answering. Ask again after a while.
    SchedulePathRetry(p);
    return;
  }
  bool continued = false;
  if (r->TryClaim(&continued, HoldsOlderSocketOn(c))) {
    log::Info("engine %d, which held the kernel node %s's connection, is gone", c.node_owner,
              c.key.faddr.ToString());
    BecomeNodeOwner(c, continued);
    ConnectPath(p);
    return;
  }
  SchedulePathRetry(p);  // somebody else just claimed it: found on the next attempt
}

Path* Engine::NodePathOf(Connection& c) { return c.NodePath(0); }

void Engine::SendToNode(Connection& c, MessagePtr m) {
  const uint16_t port = m->header.dport;
  const uint32_t key = NodePathFor(c, m->header.sport);
  auto waiting = c.unresolved.find(port);
  if (key == 0 || (waiting != c.unresolved.end() && !waiting->second.empty())) {
    // Until the paths are agreed (SetNodePaths resolves), behind what waits.
    c.unresolved[port].push_back(std::move(m));
    return;
  }
  PathSend(GetPath(c, key, /*connect=*/true), std::move(m));
}

void Engine::SendNodeCongestionMap(Connection& c) {
  // One map per connection, as the kernel's (c_map_queued): on the first
  // path that is up.
  for (int i = 0; i < kNodePathsMax; ++i) {
    Path* p = c.NodePath(i);
    if (p != nullptr && p->link && IsKernelPath(*p)) {
      SendCongestionMap(*p);
      return;
    }
  }
}

namespace {
// A data message passed on between a relayer, the owner and the node: ports,
// length and payload of `h`; a new sequence, no flags.
MessagePtr RelayedCopy(const wire::Header& h, Payload&& payload, const RdsAddr& saddr,
                       const RdsAddr& daddr) {
  auto m = NewMessage();
  m->header.sport = h.sport;
  m->header.dport = h.dport;
  m->header.len = h.len;
  m->payload = std::move(payload);
  m->saddr = saddr;
  m->daddr = daddr;
  return m;
}
}  // namespace

void Engine::RelayToNode(Path& from, const wire::Header& h, Payload&& payload) {
  Connection& c = from.conn;
  MessagePtr m = RelayedCopy(h, std::move(payload), c.key.laddr, c.key.faddr);
  m->relay_pid = from.peer_pid;
  m->relay_seq = h.sequence;
  stats::Inc(stats::kShimRelayedToNode);
  if (h.flags & wire::kFlagRetransmitted) {
    // Perhaps through an owner that died (StartTakeover).
    Connection::Takeover::NodeSeq at;
    switch (TakeoverFate(c, from.peer_pid, h.sequence, &at)) {
      case TakeoverResult::kDelivered:
        OnRelayedDone(c, *m);
        return;
      case TakeoverResult::kResend:
        m->header.sequence = at.second;
        m->header.flags |= wire::kFlagRetransmitted;
        GetPath(c, NodePathKey(at.first), /*connect=*/false).backlog.push_back(std::move(m));
        MaybeEndTakeoverHold(c);
        return;
      case TakeoverResult::kNew:
        break;
    }
  }
  SendToNode(c, std::move(m));
}

void Engine::RelayFromNode(Connection& c, uint32_t pid, const wire::Header& h, Payload&& payload) {
  Path& rp = GetPath(c, pid, /*connect=*/false);
  rp.relay_peer = true;
  MessagePtr m = RelayedCopy(h, std::move(payload), c.key.faddr, c.key.laddr);
  stats::Inc(stats::kShimRelayedFromNode);
  PathSend(rp, std::move(m));
}

void Engine::OnRelayedDone(Connection& c, const Message& m) {
  auto it = c.paths.find(m.relay_pid);
  if (it == c.paths.end() || !it->second->relay_peer) return;  // that engine is gone
  Path& rp = *it->second;
  if (m.relay_seq > rp.rx_delivered) rp.rx_delivered = m.relay_seq;
  ScheduleAck(rp, rp.rx_delivered - rp.rx_acked >=
                      static_cast<uint64_t>(conf::Get().max_unacked_packets));
}

void Engine::DropNodeMessage(Path& node, const MessagePtr& m) {
  if (m->relay_pid != 0) OnRelayedDone(node.conn, *m);
  DropMessage(m, stats::kShimSendDropNoRoute);
}

void Engine::ReturnRelayedFromNode(Path& rp, uint64_t seq) {
  Connection& c = rp.conn;
  auto it = std::find_if(rp.unacked.begin(), rp.unacked.end(),
                         [seq](const MessagePtr& m) { return m->header.sequence == seq; });
  if (it == rp.unacked.end()) return;
  MessagePtr m = std::move(*it);
  rp.unacked.erase(it);
  // The node's message found its port's socket moved to another process:
  // it goes where the port is now, as it would have on arrival.
  DeliverFromNode(c, std::move(m));
}

void Engine::DeliverFromNode(Connection& c, MessagePtr m) {
  const uint16_t port = m->header.dport;
  // Looked up again if the registry names this process: a thread of it
  // binds the socket right now and records the port last, inside the bind
  // table's lock. A socket parked meanwhile (kParked) makes the message wait
  // for its next owner.
  auto deliver_here = [&] {
    std::shared_ptr<RdsSocket> rs = FindBound(c.ns->key(), {c.key.laddr, port});
    if (!rs) return false;
    m->header.sequence = 0;
    m->header.ack = 0;
    m->header.flags = 0;
    return Deliver(*rs, std::move(m)) != DeliverResult::kParked;
  };
  if (deliver_here()) return;
  absl::StatusOr<pid_t> owner = c.ns->ports().Owner(c.key.laddr, port);
  if (owner.ok() && static_cast<uint32_t>(*owner) == pid_ && deliver_here()) return;
  if (owner.ok() && *owner > 0 && static_cast<uint32_t>(*owner) != pid_) {
    wire::Header h = m->header;
    RelayFromNode(c, static_cast<uint32_t>(*owner), h, std::move(m->payload));
    return;
  }
  if (owner.ok() && *owner == kParkedPortOwner) {
    wire::Header h = m->header;
    HoldNodeMessage(c, h, std::move(m->payload));
    return;
  }
  stats::Inc(stats::kRecvDropNoSock);
}

void Engine::HoldNodeMessage(Connection& c, const wire::Header& h, Payload&& payload) {
  if (c.node_held_bytes + h.len > kNodeHeldMax) {
    log::Warn("%s -> %s: more than %zu MiB of a kernel node's messages wait for sockets between "
              "processes; one for port %d is dropped",
              c.key.laddr.ToString(), c.key.faddr.ToString(), kNodeHeldMax >> 20, h.dport);
    stats::Inc(stats::kRecvDropNoSock);
    return;
  }
  MessagePtr m = NewMessage();
  m->header = h;
  m->payload = std::move(payload);
  m->saddr = c.key.faddr;
  m->daddr = c.key.laddr;
  c.node_held_bytes += h.len;
  c.node_held[h.dport].push_back(std::move(m));
  if (c.node_held_timer) return;
  Connection* cp = &c;
  c.node_held_timer = loop_.After(kParkedRetry, [this, cp] { ReleaseHeldNodeMessages(*cp); });
}

void Engine::ReleaseHeldNodeMessages(Connection& c) {
  c.node_held_timer = 0;
  std::vector<uint16_t> ready;
  for (const auto& [port, q] : c.node_held) {
    absl::StatusOr<pid_t> owner = c.ns->ports().Owner(c.key.laddr, port);
    if (!owner.ok() || *owner != kParkedPortOwner) ready.push_back(port);
  }
  for (uint16_t port : ready) {
    std::deque<MessagePtr> q = std::move(c.node_held[port]);
    c.node_held.erase(port);
    for (MessagePtr& m : q) {
      c.node_held_bytes -= m->header.len;
      DeliverFromNode(c, std::move(m));
    }
  }
  if (!c.node_held.empty() && !c.node_held_timer) {
    Connection* cp = &c;
    c.node_held_timer = loop_.After(kParkedRetry, [this, cp] { ReleaseHeldNodeMessages(*cp); });
  }
}

void Engine::AcceptRelayLink(const std::shared_ptr<Link>& link, const std::shared_ptr<NetNs>& ns,
                             const control::Hello& h) {
  // Both ends name the connection alike: (our address, the node's).
  Connection& c = GetConnection(ns, h.from_addr, h.to_addr);
  const bool to_owner = h.relay == control::Relay::kToOwner;
  Path* p = nullptr;
  if (to_owner) {
    if (!c.node_record || !c.node_record->owned()) {
      Reply(link, control::HelloResult::kNotNodeOwner, 0, true);
      return;
    }
    p = &GetPath(c, h.pid, /*connect=*/false);
    p->relay_peer = true;
  } else {
    if ((c.node_record && c.node_record->owned()) || NodeRecordOf(c, false) == nullptr) {
      Reply(link, control::HelloResult::kNotNodeOwner, 0, true);
      return;
    }
    if (!c.relaying() || c.node_owner != h.pid) RelayThrough(c, h.pid);
    p = &GetPath(c, kKernelNodePid, /*connect=*/false);
  }
  if (p->connecting) {
    // Both engines opened the link at once: the smaller pid's survives.
    if (pid_ < h.pid) {
      Reply(link, control::HelloResult::kRejectCollision, 0, true);
      return;
    }
    p->connecting->Close();
    p->connecting.reset();
  }
  incoming_.erase(link);
  Reply(link, control::HelloResult::kAccept, 0, false, p->rx_delivered);
  AttachLink(*p, link, h.gen, h.ack);
}

void Engine::ReachKnownNodes(const std::shared_ptr<NetNs>& ns) {
  for (const auto& [laddr, faddr] : NodeRecord::List(ns->ports().dir())) {
    if (!ns->IsLocalAddress(laddr) || ns->IsLocalAddress(faddr)) continue;
    Connection& c = GetConnection(ns, laddr, faddr);
    if (c.kernel_peer || c.query_link || c.query_timer || !c.paths.empty()) continue;
    if (FindNodeOwner(c)) continue;  // an engine of this host talks to it
    log::Info("%s -> %s: a kernel RDS node this host talked to before; asking it again",
              laddr.ToString(), faddr.ToString());
    c.probes_left = kNodeProbes - 1;
    StartQueryLink(c, 0);
  }
}

CongBits Engine::CongestionMapFor(Path& p) {
  CongestionTable& t = CongestionTable::Get();
  Connection& c = p.conn;
  // To a relayer: the node's map, as the owner last received it.
  if (p.relay_peer) return t.PeerMap(c.key.ns, c.key.faddr, kKernelNodePid);
  CongBits bits = t.LocalMap(c.key.ns, c.key.laddr);
  if (IsKernelPath(p)) {
    // To the node: the host's map of the address, every relayer's ports too.
    for (auto& [pid, q] : c.paths) {
      if (!q->relay_peer) continue;
      CongBits theirs = t.PeerMap(c.key.ns, c.key.laddr, pid);
      for (size_t i = 0; i < bits.size(); ++i) bits[i] |= theirs[i];
    }
  }
  return bits;
}

void Engine::OnRelayCongestionMap(Path& p, const uint8_t* bits) {
  Connection& c = p.conn;
  if (p.relay_peer) {
    // A relayer's own ports at our common address: the node hears of them from us.
    CongestionTable::Get().SetPeerMap(c.key.ns, c.key.laddr, p.peer_pid, bits);
    SendNodeCongestionMap(c);
    return;
  }
  // The node's map (on whichever of its paths): every relayer sees it too.
  CongestionTable::Get().SetPeerMap(c.key.ns, c.key.faddr, kKernelNodePid, bits);
  if (IsKernelPath(p)) {
    for (auto& [pid, q] : c.paths) {
      if (q->relay_peer) SendCongestionMap(*q);
    }
  }
}

}  // namespace rds
