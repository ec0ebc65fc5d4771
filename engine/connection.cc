// engine/connection.cc — connections and their paths (kernel connection.c,
// threads.c): finding or making them, connecting a path, its hello, up and
// down, reconnect back-off, dropping a dead peer's path, resets and
// congestion-map updates on every path.
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
#include "transports/host_channel.h"
#include "engine/engine_internal.h"

namespace rds {

Connection& Engine::GetConnection(const std::shared_ptr<NetNs>& ns, const RdsAddr& laddr,
                                  const RdsAddr& faddr) {
  ConnKey key{ns->key(), laddr, faddr};
  auto it = connections_.find(key);
  if (it != connections_.end()) return *it->second;
  bool local = ns->IsLocalAddress(faddr);
  auto c = std::make_unique<Connection>(key, ns, local);
  Connection& ref = *c;
  connections_[key] = std::move(c);
  if (!local && transports_.UsesRdma(ns, laddr)) {
    // The kernel's choice (rds_rdma before rds_tcp). Over RDMA every peer
    // speaks the node protocol: one connection per address pair, one path.
    ref.rdma = true;
    ref.kernel_peer = true;
    ref.node_npaths = 1;
  }
  log::Debug("connection %s -> %s (%s)", laddr.ToString(), faddr.ToString(),
             local ? "same host" : (ref.rdma ? "remote, RDMA" : "remote"));
  return ref;
}

Path& Engine::GetPath(Connection& c, uint32_t pid, bool connect) {
  auto it = c.paths.find(pid);
  if (it == c.paths.end()) it = c.paths.emplace(pid, std::make_unique<Path>(c, pid)).first;
  Path& p = *it->second;
  if (connect && !p.link && !p.connecting && p.retry_timer == 0) ConnectPath(p);
  return p;
}

// ---------------------------------------------------------------------------
// Paths: connecting, hello, up and down.

void Engine::ConnectPath(Path& p) {
  Connection& c = p.conn;
  if (IsKernelPath(p) && (!MayConnectNodePath(p) || DelayNodeReopen(p))) return;
  // Over RDMA a node (kernel, or a shim host's owning engine) takes a second
  // request for an address pair whose connection is up as proof that it is
  // stale and drops it: only this host's owner connects, others relay. (Over
  // TCP the claim follows the connection: the node's reset tells.)
  if (IsKernelPath(p) && c.rdma && !ClaimKernelNode(c)) return;  // relaying now
  if (fault::Enabled()) {
    if (fault::FailConnect()) {
      stats::Inc(stats::kShimConnFailed);
      SchedulePathRetry(p);
      return;
    }
    absl::Duration delay = fault::ConnectDelay();
    if (delay > absl::ZeroDuration() && !p.connect_delayed) {
      p.connect_delayed = true;
      Path* pp = &p;
      p.retry_timer = loop_.After(delay, [this, pp] {
        pp->retry_timer = 0;
        if (!pp->link && !pp->connecting) ConnectPath(*pp);
      });
      return;
    }
    p.connect_delayed = false;
  }
  // A relay link (engine/kernel_relay.cc) goes to the engine of this host
  // that owns the node's connection, or from it to a relayer.
  const bool to_owner = p.node_index >= 0 && c.relaying();
  const uint32_t target = IsKernelPath(p) ? 0 : (to_owner ? c.node_owner : p.peer_pid);
  LinkTarget to{c.ns, c.key.laddr, c.key.faddr, target};
  if (IsKernelPath(p)) {
    to.node_path = p.node_index;
    to.source_port = p.last_source_port;  // LinkTarget::source_port
    if (to.source_port != 0) {
      log::Debug("%s: reconnecting from port %d, the last connection's",
                 c.key.faddr.ToString(), to.source_port);
    }
  }
  const bool same_host = c.local || to_owner || p.relay_peer;
  Transport& transport = !same_host && c.rdma ? *transports_.rdma : transports_.For(same_host);
  absl::StatusOr<std::shared_ptr<Link>> opened =
      transport.Connect(to,
                   absl::StrFormat("%s->%s pid %d", c.key.laddr.ToString(),
                                   c.key.faddr.ToString(), target));
  if (!opened.ok()) {
    log::Debug("connect %s: %s", c.key.faddr.ToString(), opened.status().ToString());
    if (to_owner && absl::IsNotFound(opened.status())) {
      OnRelayOwnerGone(p);
    } else if (absl::IsNotFound(opened.status())) {
      DropPath(p, c.local || p.relay_peer ? "peer engine is gone" : "no engine serves that host");
    } else {
      SchedulePathRetry(p);
    }
    return;
  }
  std::shared_ptr<Link> link = *std::move(opened);
  p.connecting = link;
  p.connecting_since = absl::Now();
  if (IsKernelPath(p)) {
    ConnectKernelPath(p, link);
    return;
  }
  Path* pp = &p;
  std::weak_ptr<Link> weak = link;
  Link::Callbacks cb;
  cb.on_connected = [this, pp, weak] {
    auto l = weak.lock();
    if (!l) return;
    control::Hello h;
    h.kind = control::HelloKind::kLink;
    h.pid = pid_;
    h.gen = gen_;
    h.uid = getuid();
    h.ns = pp->conn.key.ns;
    h.from_addr = pp->conn.key.laddr;
    h.to_addr = pp->conn.key.faddr;
    h.target_pid = pp->peer_pid;
    h.ack = pp->rx_delivered;
    if (pp->relay_peer) {
      h.relay = control::Relay::kFromOwner;
    } else if (pp->node_index >= 0) {
      h.relay = control::Relay::kToOwner;
      h.target_pid = pp->conn.node_owner;
    }
    l->Send(control::EncodeHello(h));
  };
  cb.on_message = [this, pp, weak](wire::Header&& h, Payload&& payload) {
    auto l = weak.lock();
    if (!l) return;
    if (LooksLikeKernelNode(h)) {
      // A kernel node where an engine was expected: its connection is the
      // node's path, and what waited for that engine goes there.
      pp->connecting.reset();
      Connection& c = pp->conn;
      Engine* self = this;  // this callback is replaced (destroyed) by the adoption
      std::deque<MessagePtr> moved;
      for (MessagePtr& m : pp->backlog) {
        m->header.flags &= static_cast<uint8_t>(~wire::kFlagRetransmitted);
        moved.push_back(std::move(m));
      }
      pp->backlog.clear();
      self->AdoptKernelLink(c, l, 0, std::move(h), std::move(payload));
      for (MessagePtr& m : moved) self->SendToNode(c, std::move(m));
      return;
    }
    absl::StatusOr<control::Hello> hello = control::DecodeHello(h, payload);
    if (!hello.ok() || hello->kind != control::HelloKind::kReply) {
      stats::Inc(stats::kShimConnDropBadInput);
      l->Close();
      pp->connecting.reset();
      SchedulePathRetry(*pp);
      return;
    }
    OnLinkReply(*pp, l, *hello);
  };
  cb.on_closed = [this, pp, weak](const absl::Status& why) {
    OnConnectFailed(*pp, weak.lock(), why);
  };
  link->SetCallbacks(std::move(cb));
}

void Engine::OnConnectFailed(Path& p, const std::shared_ptr<Link>& link, const absl::Status& why) {
  if (p.connecting != link) return;
  p.connecting.reset();
  log::Debug("connect attempt to %s failed: %s", p.conn.key.faddr.ToString(), why.ToString());
  // The last connection's port is tried until an attempt from it is answered
  // (its SYN may be lost as the one that failed our side of it).
  if (!absl::IsDeadlineExceeded(why)) p.last_source_port = 0;
  if (absl::IsNotFound(why) && p.node_index >= 0 && p.conn.relaying()) {
    OnRelayOwnerGone(p);
    return;
  }
  if (absl::IsNotFound(why)) {
    // Refused: no engine (nor kernel node) serves that host any more (every
    // engine listens on the rendezvous port), so the peer is gone with its
    // sockets. Its messages are dropped as a kernel host drops messages for
    // a port nobody bound (DESIGN.md §3.3).
    DropPath(p, IsKernelPath(p) ? "no RDS node serves that host" : "no engine serves that host");
    return;
  }
  SchedulePathRetry(p);
}

void Engine::OnLinkReply(Path& p, const std::shared_ptr<Link>& link, const control::Hello& h) {
  if (p.connecting != link) {
    link->Close();
    return;
  }
  p.connecting.reset();
  switch (h.result) {
    case control::HelloResult::kAccept:
      AttachLink(p, link, h.gen, h.ack);
      return;
    case control::HelloResult::kRejectCollision: {
      // The peer's own link to us wins (or it already has one): wait for it,
      // and only try again if it has not come up after a while.
      link->Close();
      Path* pp = &p;
      if (!p.retry_timer) {
        p.retry_timer = loop_.After(absl::Seconds(1), [this, pp] {
          pp->retry_timer = 0;
          if (!pp->link && !pp->connecting && !pp->backlog.empty()) ConnectPath(*pp);
        });
      }
      return;
    }
    case control::HelloResult::kNoEngine:
    case control::HelloResult::kNotNodeOwner:
      link->Close();
      if (p.node_index >= 0 && p.conn.relaying()) {
        OnRelayOwnerGone(p);  // the owner went, or gave the connection up
        return;
      }
      DropPath(p, "peer engine is gone");
      return;
    default:
      link->Close();
      DropPath(p, "peer refused the link");
      return;
  }
}

void Engine::AttachLink(Path& p, std::shared_ptr<Link> link, uint32_t peer_gen,
                        uint64_t peer_ack) {
  if (p.link && p.link != link) {
    // The peer connected again before this side saw its old link fail (it cut
    // the link, or reset the connection): the old link is dropped here, and
    // that is a connection reset as much as a failure seen first is.
    log::Info("path to pid %d (%s): new link replaces the old one", p.peer_pid,
              p.conn.key.faddr.ToString());
    stats::Inc(stats::kConnReset);
    p.link->Close();
    p.link.reset();
    ReturnUnackedToBacklog(p);
  }
  if (p.peer_gen != 0 && peer_gen != p.peer_gen) {
    // A new incarnation of the peer engine: what was sent to the old one is
    // stale (its sockets are gone), and both sequence spaces start again
    // (kernel rds_conn_peer_gen_update).
    log::Info("peer pid %d restarted (generation %08x -> %08x)", p.peer_pid, p.peer_gen, peer_gen);
    stats::Inc(stats::kShimPeerRestarts);
    std::deque<MessagePtr> keep;
    for (MessagePtr& m : p.backlog) {
      if (m->header.flags & wire::kFlagRetransmitted) {
        DropMessage(m, stats::kShimSendDropNoRoute);
      } else {
        keep.push_back(std::move(m));
      }
    }
    p.backlog.swap(keep);
    p.next_rx_seq = 0;
    p.rx_delivered = p.rx_acked = 0;
  } else {
    // What the peer already delivered need not be sent again.
    std::deque<MessagePtr> keep;
    for (MessagePtr& m : p.backlog) {
      if ((m->header.flags & wire::kFlagRetransmitted) && m->header.sequence <= peer_ack) {
        ReleaseSendSpace(*m);
      } else {
        keep.push_back(std::move(m));
      }
    }
    p.backlog.swap(keep);
  }
  p.rx_messages = 0;
  if (p.retry_timer) {
    loop_.Cancel(p.retry_timer);
    p.retry_timer = 0;
  }
  p.link = link;
  p.peer_gen = peer_gen;
  p.up_since = absl::Now();
  p.last_source_port = 0;
  p.backoff = absl::ZeroDuration();
  Path* pp = &p;
  std::weak_ptr<Link> weak = link;
  Link::Callbacks cb;
  cb.on_message = [this, pp](wire::Header&& h, Payload&& payload) {
    OnPathMessage(*pp, std::move(h), std::move(payload));
  };
  cb.payload_storage = [this, pp](const wire::Header& h, PayloadFiller& filler) {
    return DirectStorage(*pp, h, filler);
  };
  cb.on_transport_acked = [this, pp](uint64_t seq) { OnAck(*pp, seq); };
  cb.on_closed = [this, pp, weak](const absl::Status& why) {
    if (pp->link != weak.lock()) return;
    OnPathDown(*pp, why);
  };
  link->SetCallbacks(std::move(cb));
  log::Debug("path up: %s", link->Describe());
  SendCongestionMap(p);  // the first message on every new link (§B.3)
  std::deque<MessagePtr> backlog;
  backlog.swap(p.backlog);
  for (MessagePtr& m : backlog) {
    if (m->cancelled.load()) continue;
    if (m->header.flags & wire::kFlagRetransmitted) stats::Inc(stats::kShimRetransmitted);
    Transmit(p, std::move(m));
  }
  // A kernel node: our NPATHS and generation on every new first path
  // (kernel-rds.md §E.4, §E.7), after what is retransmitted (its sequence
  // numbers are older) and before new data; then the other paths.
  if (IsKernelPath(p)) {
    // (Not over RDMA: kernel rds_rdma is not multipath-capable and sends no
    // handshake; one path.)
    if (p.node_index == 0 && !p.conn.rdma) {
      p.conn.pings_unanswered.clear();  // asked on a connection that is gone
      SendHandshake(p, /*pong=*/false);
    }
    ConnectNodePaths(p.conn);
  }
  ResolvePending(p.conn);
}

void Engine::OnPathDown(Path& p, const absl::Status& why) {
  log::Info("path to pid %d (%s) down: %s", p.peer_pid, p.conn.key.faddr.ToString(),
            why.ToString());
  if (IsKernelPath(p)) NoteKernelPathDown(p);
  stats::Inc(stats::kConnReset);
  if (IsKernelPath(p) && p.conn.key.laddr < p.conn.key.faddr && !p.conn.rdma) {
    // We connected it (the smaller address): reconnect from its port.
    std::optional<Link::Endpoints> e = p.link->endpoints();
    p.last_source_port = e ? e->local.port : 0;
  }
  p.link.reset();
  p.last_destination = {};  // a closed socket's object is not kept for an idle path
  ReturnUnackedToBacklog(p);
  // Route queries in flight on the dead link are asked again: on another
  // path, or through the host's rendezvous port (which also finds out that
  // nobody serves the host any more). Deferred: the caller may be walking
  // the connection's paths.
  p.conn.querying.clear();
  Connection* cp = &p.conn;
  loop_.Defer([this, cp] { ResolvePending(*cp); });
  // Reconnect even with nothing to send: that is how a dead peer engine is
  // found out (and its congestion map, which may block senders, dropped).
  SchedulePathRetry(p);
}

void Engine::SchedulePathRetry(Path& p) {
  if (p.retry_timer || p.link || p.connecting) return;
  const conf::Settings& cfg = conf::Get();
  absl::Duration delay;
  if (p.backoff == absl::ZeroDuration()) {
    delay = absl::ZeroDuration();  // the first retry is immediate (rds_queue_reconnect)
    p.backoff = FirstReconnectBackoff();
  } else {
    thread_local absl::BitGen gen;
    delay = absl::Milliseconds(
        absl::Uniform<int64_t>(gen, 0, std::max<int64_t>(absl::ToInt64Milliseconds(p.backoff), 1)));
    p.backoff = std::min(p.backoff * 2, absl::Milliseconds(cfg.reconnect_max_delay_ms));
    // Unreachable now (PathUnreachable): what closed sockets left here would
    // wait for a peer that may never come back (close drops such messages).
    DropClosedSenders(p.backlog, nullptr);
  }
  Path* pp = &p;
  p.retry_timer = loop_.After(delay, [this, pp] {
    pp->retry_timer = 0;
    if (!pp->link && !pp->connecting) ConnectPath(*pp);
  });
}

void Engine::DropPath(Path& p, const char* why) {
  log::Info("dropping path to pid %d (%s): %s", p.peer_pid, p.conn.key.faddr.ToString(), why);
  Connection& c = p.conn;
  for (MessagePtr& m : p.backlog) DropNodeMessage(p, m);
  for (MessagePtr& m : p.unacked) DropNodeMessage(p, m);
  p.backlog.clear();
  p.unacked.clear();
  if (p.retry_timer) loop_.Cancel(p.retry_timer);
  if (p.ack_timer) loop_.Cancel(p.ack_timer);
  if (p.link) p.link->Close();
  if (p.connecting) p.connecting->Close();
  for (auto it = c.routes.begin(); it != c.routes.end();) {
    if (it->second.pid == p.peer_pid) {
      c.routes.erase(it++);
    } else {
      ++it;
    }
  }
  const bool relay_peer = p.relay_peer;
  CongestionTable::Get().SetPeerMap(c.key.ns, relay_peer ? c.key.laddr : c.key.faddr,
                                    p.peer_pid, nullptr);
  auto it = c.paths.find(p.peer_pid);
  if (it != c.paths.end()) Bury(std::move(it->second));
  c.paths.erase(p.peer_pid);
  if (relay_peer) {
    // The relayer's ports are gone: the node hears it from the host's map.
    SendNodeCongestionMap(c);
  }
}

// A congestion map on the wire (§B.3): flags 0x01, sequence 0, ports 0,
// 8192 bytes, outside the path's sequence space and never retransmitted.
void Engine::SendCongestionMap(Path& p) {
  if (!p.link) return;
  CongBits bits = CongestionMapFor(p);
  auto m = NewMessage();
  m->header.flags = wire::kFlagCongBitmap;
  m->header.len = wire::kCongMapBytes;
  m->payload = Payload(bits.data(), bits.size());
  p.link->Send(std::move(m));
}

void Engine::ResetConnectionsHostWide(NetNsKey ns, RdsAddr src, RdsAddr dst) {
  ResetConnections(ns, src, dst);
  control::Hello h;
  h.kind = control::HelloKind::kReset;
  h.pid = pid_;
  h.gen = gen_;
  h.uid = getuid();
  h.ns = ns;
  h.from_addr = src;
  h.to_addr = dst;
  MessagePtr m = control::EncodeHello(h);
  for (const std::string& path : HostRegistry::Get().OtherEngineSockets()) {
    host_channel::Send(path, m).IgnoreError();  // an engine that is gone has nothing to reset
  }
}

void Engine::ResetConnections(NetNsKey ns, RdsAddr src, RdsAddr dst) {
  loop_.Post([this, ns, src, dst] {
    for (auto& [key, c] : connections_) {
      if (key.ns != ns || key.laddr.bytes != src.bytes || key.faddr.bytes != dst.bytes) continue;
      for (auto& [pid, p] : c->paths) {
        if (!p->link) continue;
        p->link->Close();
        OnPathDown(*p, absl::AbortedError("RDS_CONN_RESET"));
      }
    }
  });
}

void Engine::SendCongestionUpdates(std::shared_ptr<NetNs> ns, RdsAddr addr) {
  loop_.Post([this, ns = std::move(ns), addr] {
    for (auto& [key, c] : connections_) {
      if (key.ns != ns->key() || key.laddr != addr) continue;
      if (c->kernel_peer && !c->relaying()) {
        SendNodeCongestionMap(*c);  // once for all the node's paths
        for (auto& [pid, p] : c->paths) {
          if (p->relay_peer) SendCongestionMap(*p);
        }
        continue;
      }
      for (auto& [pid, p] : c->paths) SendCongestionMap(*p);
    }
  });
}

void Engine::Bury(std::unique_ptr<Path> p) {
  graveyard_.push_back(std::move(p));
  loop_.Post([this] { graveyard_.clear(); });
}

}  // namespace rds
